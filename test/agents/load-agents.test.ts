import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentRegistry } from '../../src/agents/agent-registry.js';
import {
  DEFAULT_COMPACT_COUNT,
  DEFAULT_MAX_ITERATIONS,
  DEFAULT_MAX_SUMMARY_CHARS,
  type AgentConfig,
} from '../../src/agents/agent-config.js';
import { formatProblem, loadAgents } from '../../src/agents/load-agents.js';
import { CairnError } from '../../src/errors.js';

const REPO_AGENTS_DIR = fileURLToPath(new URL('../../agents', import.meta.url));

let root: string;
let agentsDir: string;

beforeEach(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-agents-'));
  agentsDir = path.join(root, 'agents');
  fs.mkdirSync(agentsDir);
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

/** Writes agents/<folder>/agent.json (an object is serialised, a string written as is). */
function writeAgent(folder: string, content: object | string): string {
  const dir = path.join(agentsDir, folder);
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'agent.json');
  fs.writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

function minimal(name: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name, system: 'You help.', ...extra };
}

/** Loads a single agent `a` built from `extra` and returns its problems as [pointer, rule]. */
function problemsOf(extra: Record<string, unknown>): [string, string][] {
  const file = writeAgent('a', { name: 'a', ...extra });
  const { agents, problems } = loadAgents(agentsDir);
  expect(agents).toHaveLength(problems.length > 0 ? 0 : 1);
  for (const p of problems) expect(p.file).toBe(file);
  return problems.map((p) => [p.pointer, p.rule]);
}

describe('loadAgents', () => {
  it('validates the demo agent shipped in the repo', () => {
    const { agents, problems } = loadAgents(REPO_AGENTS_DIR);
    expect(problems.map(formatProblem)).toEqual([]);
    const assistant = agents.find((a) => a.name === 'assistant');
    expect(assistant).toMatchObject({
      tools: ['current_time'],
      maxIterations: 10,
      defaultCompaction: { compactCount: 50, autoThreshold: 80, maxSummaryChars: 12_000 },
    });
    expect(assistant?.system).toMatch(/helpful assistant/);
  });

  it('applies the defaults, resolves dir and deep-freezes the result', () => {
    writeAgent('a', minimal('a'));
    const [agent] = loadAgents(agentsDir).agents;
    expect(agent).toEqual({
      name: 'a',
      description: '',
      system: 'You help.',
      tools: [],
      toolsNeedingApproval: [],
      maxIterations: DEFAULT_MAX_ITERATIONS,
      autoTitle: false,
      memory: { enabled: false, maxChars: 4000, write: true },
      defaultCompaction: {
        compactCount: DEFAULT_COMPACT_COUNT,
        // Absent in the file: agents compact at 80 % by default.
        autoThreshold: 80,
        // Absent too: the next summary is prepared off the turn from 60 %.
        prepareAt: 60,
        maxSummaryChars: DEFAULT_MAX_SUMMARY_CHARS,
        summaryFormat: 'sections',
        // Absent in the file: old tool results are cleared by default.
        pruneToolResults: { keepLast: 3, minTokens: 400 },
        recall: {
          enabled: true,
          maxMessages: 6,
          maxTokens: 1200,
          minScore: 0.5,
          minRelativeScore: 0.4,
        },
      },
      dir: fs.realpathSync(path.join(agentsDir, 'a')),
    } satisfies AgentConfig);
    expect(Object.isFrozen(agent)).toBe(true);
    expect(Object.isFrozen(agent?.tools)).toBe(true);
    expect(Object.isFrozen(agent?.memory)).toBe(true);
    expect(Object.isFrozen(agent?.defaultCompaction)).toBe(true);
  });

  it('keeps every field that is set', () => {
    writeAgent(
      'full',
      minimal('full', {
        $schema: '../../schemas/agent.json',
        description: 'Everything',
        model: 'gpt-4o-mini',
        tools: ['current_time', 'agent:helper', './tools/weather.js', './t.mjs'],
        maxIterations: 100,
        temperature: 0.2,
        memory: { enabled: true, maxChars: 100, write: false },
        defaultCompaction: { compactCount: 33.3, autoThreshold: 80, maxSummaryChars: 500 },
        daemon: { every: '10m', prompt: 'Check.' },
      }),
    );
    const { agents, problems } = loadAgents(agentsDir);
    expect(problems).toEqual([]);
    expect(agents[0]).toMatchObject({
      model: 'gpt-4o-mini',
      temperature: 0.2,
      memory: { enabled: true, maxChars: 100, write: false },
      defaultCompaction: { compactCount: 33.3, autoThreshold: 80, maxSummaryChars: 500 },
      daemon: { every: '10m', prompt: 'Check.' },
    });
    expect(Object.isFrozen(agents[0]?.daemon)).toBe(true);
  });

  it('reads tool entries with approval: specs in tools, the guarded ones listed apart', () => {
    writeAgent(
      'a',
      minimal('a', {
        tools: [
          'current_time',
          { tool: './tools/x.js', approval: 'required' },
          { tool: 'ask_user' },
        ],
      }),
    );
    const { agents, problems } = loadAgents(agentsDir);
    expect(problems).toEqual([]);
    expect(agents[0]).toMatchObject({
      tools: ['current_time', './tools/x.js', 'ask_user'],
      toolsNeedingApproval: ['./tools/x.js'],
    });
  });

  it('refuses at load a static tool list longer than a model request may carry', () => {
    const tools = Array.from({ length: 129 }, (_, i) => `./tools/t${i}.js`);
    const file = writeAgent('a', minimal('a', { tools }));
    const { agents, problems } = loadAgents(agentsDir);
    expect(agents).toEqual([]);
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatchObject({ file, pointer: '/tools', rule: 'maxItems' });
    expect(problems[0]!.message).toBe(
      'lists 129 tools, more than the 128 a model request may carry (the provider would refuse every turn); list fewer',
    );
    // 128 is allowed.
    writeAgent('a', minimal('a', { tools: tools.slice(0, 128) }));
    expect(loadAgents(agentsDir).problems).toEqual([]);
  });

  it('rejects a tool listed twice, once as a string and once as an object', () => {
    writeAgent('a', minimal('a', { tools: ['current_time', { tool: 'current_time' }] }));
    const { agents, problems } = loadAgents(agentsDir);
    expect(agents).toEqual([]);
    expect(problems.map((p) => [p.pointer, p.rule])).toEqual([['/tools/1', 'duplicate-tool']]);
  });

  it('accepts a cron daemon', () => {
    expect(problemsOf({ system: 'x', daemon: { cron: '0 9 * * 1-5', prompt: 'Go.' } })).toEqual([]);
  });

  it('loads systemFile from inside the agent folder', () => {
    writeAgent('a', { name: 'a', systemFile: 'prompts/system.md' });
    fs.mkdirSync(path.join(agentsDir, 'a', 'prompts'));
    fs.writeFileSync(path.join(agentsDir, 'a', 'prompts', 'system.md'), 'From a file.');
    const { agents, problems } = loadAgents(agentsDir);
    expect(problems).toEqual([]);
    expect(agents[0]?.system).toBe('From a file.');
  });

  it('reports a missing or empty systemFile', () => {
    expect(problemsOf({ systemFile: 'missing.md' })).toEqual([['/systemFile', 'system-file']]);
    fs.writeFileSync(path.join(agentsDir, 'a', 'empty.md'), '  \n');
    writeAgent('a', { name: 'a', systemFile: 'empty.md' });
    expect(loadAgents(agentsDir).problems.map((p) => p.rule)).toEqual(['system-file']);
  });

  it('sorts by name, ignores folders without agent.json and a missing agents folder', () => {
    writeAgent('zed', minimal('zed'));
    writeAgent('alpha', minimal('alpha'));
    fs.mkdirSync(path.join(agentsDir, 'not-an-agent'));
    fs.writeFileSync(path.join(agentsDir, 'README.md'), 'loose file');
    expect(loadAgents(agentsDir).agents.map((a) => a.name)).toEqual(['alpha', 'zed']);
    expect(loadAgents(path.join(root, 'nope'))).toEqual({
      agents: [],
      problems: [],
      toolLists: [],
    });
  });

  it('throws a CairnError when the agents folder cannot be read', () => {
    const notAFolder = path.join(root, 'file');
    fs.writeFileSync(notAFolder, '');
    expect(() => loadAgents(notAFolder)).toThrow(CairnError);
  });

  it('keeps loading good agents next to bad ones', () => {
    writeAgent('good', minimal('good'));
    writeAgent('bad', minimal('bad', { maxIterations: 0 }));
    writeAgent('broken', '{ "name": ');
    const { agents, problems } = loadAgents(agentsDir);
    expect(agents.map((a) => a.name)).toEqual(['good']);
    expect(problems.map((p) => [path.basename(path.dirname(p.file)), p.rule])).toEqual([
      ['bad', 'minimum'],
      ['broken', 'json-parse'],
    ]);
  });

  it('formats a problem as file:line:column: pointer message (rule)', () => {
    const file = writeAgent('x', JSON.stringify(minimal('x', { maxIterations: 101 }), null, 2));
    const [problem] = loadAgents(agentsDir).problems;
    expect(formatProblem(problem!)).toBe(`${file}:4:20: /maxIterations must be <= 100 (maximum)`);
    expect(
      formatProblem({
        file: 'agents/x/agent.json',
        pointer: '',
        rule: 'json-parse',
        message: 'bad',
      }),
    ).toBe('agents/x/agent.json: bad (json-parse)');
  });
});

describe('agent.json rules', () => {
  it.each<[string, Record<string, unknown>, [string, string][]]>([
    ['name of the wrong type', { name: 7, system: 'x' }, [['/name', 'type']]],
    [
      'description of the wrong type',
      { system: 'x', description: ['x'] },
      [['/description', 'type']],
    ],
    ['system of the wrong type', { system: 1 }, [['/system', 'type']]],
    ['tools not an array', { system: 'x', tools: 'current_time' }, [['/tools', 'type']]],
    [
      'a tool that is no name, agent or ./path',
      { system: 'x', tools: ['Bad Tool'] },
      [['/tools/0', 'pattern']],
    ],
    ['an absolute tool path', { system: 'x', tools: ['/abs/x.js'] }, [['/tools/0', 'pattern']]],
    [
      'a tool with a bad agent name',
      { system: 'x', tools: ['agent:../x'] },
      [['/tools/0', 'pattern']],
    ],
    ['duplicate tools', { system: 'x', tools: ['a', 'a'] }, [['/tools', 'uniqueItems']]],
    [
      'a tool entry with an unknown approval',
      { system: 'x', tools: [{ tool: 'a', approval: 'sometimes' }] },
      [['/tools/0/approval', 'enum']],
    ],
    [
      'a tool entry object without tool',
      { system: 'x', tools: [{ approval: 'required' }] },
      [['/tools/0', 'required']],
    ],
    [
      'a tool entry object with an unknown property',
      { system: 'x', tools: [{ tool: 'a', ask: true }] },
      [['/tools/0', 'additionalProperties']],
    ],
    [
      'a tool entry object with a bad spec',
      { system: 'x', tools: [{ tool: 'Bad Tool', approval: 'required' }] },
      [['/tools/0/tool', 'pattern']],
    ],
    ['a tool entry of the wrong type', { system: 'x', tools: [3] }, [['/tools/0', 'type']]],
    [
      'maxIterations not an integer',
      { system: 'x', maxIterations: 1.5 },
      [['/maxIterations', 'type']],
    ],
    ['maxIterations 0', { system: 'x', maxIterations: 0 }, [['/maxIterations', 'minimum']]],
    ['temperature above 2', { system: 'x', temperature: 2.1 }, [['/temperature', 'maximum']]],
    [
      'memory.enabled not boolean',
      { system: 'x', memory: { enabled: 'yes' } },
      [['/memory/enabled', 'type']],
    ],
    [
      'memory.write not boolean',
      { system: 'x', memory: { write: 'no' } },
      [['/memory/write', 'type']],
    ],
    [
      'memory.maxChars 99',
      { system: 'x', memory: { maxChars: 99 } },
      [['/memory/maxChars', 'minimum']],
    ],
    ['unknown root property', { system: 'x', prompt: 'x' }, [['', 'additionalProperties']]],
    [
      'unknown memory property',
      { system: 'x', memory: { size: 1 } },
      [['/memory', 'additionalProperties']],
    ],
    [
      'unknown defaultCompaction property',
      { system: 'x', defaultCompaction: { count: 50 } },
      [['/defaultCompaction', 'additionalProperties']],
    ],
    [
      'unknown daemon property',
      { system: 'x', daemon: { every: '1h', prompt: 'p', at: 'noon' } },
      [['/daemon', 'additionalProperties']],
    ],
    [
      'compactionCount 0',
      { system: 'x', defaultCompaction: { compactionCount: 0 } },
      [['/defaultCompaction/compactionCount', 'minimum']],
    ],
    [
      'compactionCount 100',
      { system: 'x', defaultCompaction: { compactionCount: 100 } },
      [['/defaultCompaction/compactionCount', 'maximum']],
    ],
    [
      'compactionCount as a string',
      { system: 'x', defaultCompaction: { compactionCount: '50' } },
      [['/defaultCompaction/compactionCount', 'type']],
    ],
    [
      'summaryFormat not one of sections and prose',
      { system: 'x', defaultCompaction: { summaryFormat: 'bullets' } },
      [['/defaultCompaction/summaryFormat', 'enum']],
    ],
    [
      'recall.maxMessages 0',
      { system: 'x', defaultCompaction: { recall: { maxMessages: 0 } } },
      [['/defaultCompaction/recall/maxMessages', 'minimum']],
    ],
    [
      'recall.minScore above 1',
      { system: 'x', defaultCompaction: { recall: { minScore: 1.5 } } },
      [['/defaultCompaction/recall/minScore', 'maximum']],
    ],
    [
      'recall.maxTokens below 200',
      { system: 'x', defaultCompaction: { recall: { maxTokens: 50 } } },
      [['/defaultCompaction/recall/maxTokens', 'minimum']],
    ],
    [
      'unknown recall property',
      { system: 'x', defaultCompaction: { recall: { query: 'x' } } },
      [['/defaultCompaction/recall', 'additionalProperties']],
    ],
    [
      'autoThreshold below 0',
      { system: 'x', defaultCompaction: { autoThreshold: -1 } },
      [
        ['/defaultCompaction/autoThreshold', 'oneOf'],
        ['/defaultCompaction/autoThreshold', 'minimum'],
      ],
    ],
    [
      'autoThreshold between 0 (off) and 1',
      { system: 'x', defaultCompaction: { autoThreshold: 0.5 } },
      [['/defaultCompaction/autoThreshold', 'oneOf']],
    ],
    [
      'autoThreshold 101',
      { system: 'x', defaultCompaction: { autoThreshold: 101 } },
      [['/defaultCompaction/autoThreshold', 'maximum']],
    ],
    [
      'pruneToolResults true (on is an object; false is off)',
      { system: 'x', defaultCompaction: { pruneToolResults: true } },
      [['/defaultCompaction/pruneToolResults', 'const']],
    ],
    [
      'pruneToolResults.keepLast below 0',
      { system: 'x', defaultCompaction: { pruneToolResults: { keepLast: -1 } } },
      [['/defaultCompaction/pruneToolResults/keepLast', 'minimum']],
    ],
    [
      'unknown pruneToolResults property',
      { system: 'x', defaultCompaction: { pruneToolResults: { batch: 2 } } },
      [['/defaultCompaction/pruneToolResults', 'additionalProperties']],
    ],
    [
      'maxSummaryChars 499',
      { system: 'x', defaultCompaction: { maxSummaryChars: 499 } },
      [['/defaultCompaction/maxSummaryChars', 'minimum']],
    ],
    [
      'maxSummaryChars not an integer',
      { system: 'x', defaultCompaction: { maxSummaryChars: 600.5 } },
      [['/defaultCompaction/maxSummaryChars', 'type']],
    ],
    [
      'both system and systemFile (the file is still read)',
      { system: 'x', systemFile: 's.md' },
      [
        ['', 'oneOf'],
        ['/systemFile', 'system-file'],
      ],
    ],
    ['neither system nor systemFile', {}, [['', 'oneOf']]],
    [
      'daemon with both every and cron',
      { system: 'x', daemon: { every: '1h', cron: '* * * * *', prompt: 'p' } },
      [['/daemon', 'oneOf']],
    ],
    [
      'daemon with neither every nor cron',
      { system: 'x', daemon: { prompt: 'p' } },
      [['/daemon', 'oneOf']],
    ],
    ['daemon without prompt', { system: 'x', daemon: { every: '1h' } }, [['/daemon', 'required']]],
    [
      'daemon with a bad duration',
      { system: 'x', daemon: { every: '10min', prompt: 'p' } },
      [['/daemon/every', 'pattern']],
    ],
    [
      'daemon with a zero duration',
      { system: 'x', daemon: { every: '0s', prompt: 'p' } },
      [['/daemon/every', 'pattern']],
    ],
  ])('rejects %s', (_label, extra, expected) => {
    expect(problemsOf(extra)).toEqual(expected);
  });

  it('clears old tool results by default; false turns it off; a partial setting keeps the other default', () => {
    const pruneOf = (defaultCompaction: object) => {
      writeAgent('a', { name: 'a', system: 'x', defaultCompaction });
      return loadAgents(agentsDir).agents[0]?.defaultCompaction.pruneToolResults;
    };
    expect(pruneOf({})).toEqual({ keepLast: 3, minTokens: 400 });
    expect(pruneOf({ pruneToolResults: false })).toBe(false);
    expect(pruneOf({ pruneToolResults: { keepLast: 5 } })).toEqual({ keepLast: 5, minTokens: 400 });
  });

  it('takes compactCount, and compactionCount as its older spelling, but not both', () => {
    const percentOf = (defaultCompaction: object) => {
      writeAgent('a', { name: 'a', system: 'x', defaultCompaction });
      return loadAgents(agentsDir).agents[0]?.defaultCompaction.compactCount;
    };
    expect(percentOf({ compactCount: 25 })).toBe(25);
    expect(percentOf({ compactionCount: 35 })).toBe(35);
    expect(percentOf({})).toBe(DEFAULT_COMPACT_COUNT);
    expect(
      problemsOf({ system: 'x', defaultCompaction: { compactCount: 25, compactionCount: 25 } }),
    ).toEqual([['/defaultCompaction/compactionCount', 'alias']]);
    expect(problemsOf({ system: 'x', defaultCompaction: { compactCount: 0 } })).toEqual([
      ['/defaultCompaction/compactCount', 'minimum'],
    ]);
  });

  it('compacts at 80 % when autoThreshold is absent; 0 turns it off', () => {
    const thresholdOf = (defaultCompaction?: Record<string, unknown>) => {
      writeAgent('a', { name: 'a', system: 'x', ...(defaultCompaction && { defaultCompaction }) });
      const { agents, problems } = loadAgents(agentsDir);
      expect(problems).toEqual([]);
      return agents[0]?.defaultCompaction.autoThreshold;
    };
    expect(thresholdOf()).toBe(80);
    expect(thresholdOf({ compactCount: 40 })).toBe(80);
    expect(thresholdOf({ autoThreshold: 0 })).toBe(0);
    expect(thresholdOf({ autoThreshold: 1 })).toBe(1);
    expect(thresholdOf({ autoThreshold: 65.5 })).toBe(65.5);
  });

  it('accepts a fractional compactionCount and the range ends', () => {
    for (const compactionCount of [1, 33.3, 99]) {
      expect(problemsOf({ system: 'x', defaultCompaction: { compactionCount } })).toEqual([]);
    }
    expect(
      problemsOf({
        system: 'x',
        defaultCompaction: { autoThreshold: 100, maxSummaryChars: 200_000 },
      }),
    ).toEqual([]);
  });

  it('reports every error of a file, not just the first, in the order of the file', () => {
    expect(problemsOf({ system: 1, maxIterations: 0, memory: { maxChars: 1, x: 1 } })).toEqual([
      ['/system', 'type'],
      ['/maxIterations', 'minimum'],
      ['/memory/maxChars', 'minimum'],
      ['/memory', 'additionalProperties'],
    ]);
  });

  it('names the unknown property and the oneOf alternatives in the message', () => {
    writeAgent('a', minimal('a', { memory: { size: 1 } }));
    writeAgent('b', minimal('b', { systemFile: 's.md' }));
    fs.writeFileSync(path.join(agentsDir, 'b', 's.md'), 'also');
    expect(loadAgents(agentsDir).problems.map((p) => p.message)).toEqual([
      'must NOT have additional property "size"',
      'must have exactly one of "system", "systemFile"',
    ]);
  });

  it('rejects a name that differs from the folder, and a bad name pattern', () => {
    writeAgent('a', minimal('b'));
    writeAgent('Upper', minimal('Upper'));
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([
      ['/name', 'pattern'],
      ['/name', 'name-mismatch'],
    ]);
  });

  it('rejects a name longer than 64 characters', () => {
    const long = 'a'.repeat(65);
    writeAgent(long, minimal(long));
    expect(loadAgents(agentsDir).problems.map((p) => p.rule)).toEqual(['pattern']);
  });

  it('rejects invalid JSON and a non-object document', () => {
    expect(problemsOf({}).length).toBeGreaterThan(0);
    writeAgent('a', '{"name": "a", }');
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([
      ['', 'json-parse'],
    ]);
    writeAgent('a', '["a"]');
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([['', 'type']]);
  });
});

describe('paths that leave the agent folder', () => {
  let outside: string;
  beforeEach(() => {
    outside = path.join(root, 'outside');
    fs.mkdirSync(outside);
    fs.writeFileSync(path.join(outside, 'secret.md'), 'secret');
    fs.writeFileSync(path.join(outside, 'x.js'), 'export default {}');
  });

  it.each<[string, Record<string, unknown>, string]>([
    ['a systemFile climbing out', { systemFile: '../../etc/passwd' }, '/systemFile'],
    ['a systemFile to a sibling', { systemFile: '../../outside/secret.md' }, '/systemFile'],
    ['an absolute systemFile', { systemFile: '/etc/passwd' }, '/systemFile'],
    ['a tool climbing out', { system: 'x', tools: ['./../x.js'] }, '/tools/0'],
    [
      'a tool climbing out further in',
      { system: 'x', tools: ['ok', './tools/../../../outside/x.js'] },
      '/tools/1',
    ],
  ])('rejects %s', (_label, extra, pointer) => {
    expect(problemsOf(extra)).toEqual([[pointer, 'path-escape']]);
  });

  it('rejects a systemFile that is a symlink pointing outside', () => {
    writeAgent('a', { name: 'a', systemFile: 'system.md' });
    fs.symlinkSync(path.join(outside, 'secret.md'), path.join(agentsDir, 'a', 'system.md'));
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([
      ['/systemFile', 'path-escape'],
    ]);
  });

  it('rejects a tool reached through a symlinked folder, even when the file does not exist', () => {
    writeAgent('a', minimal('a', { tools: ['./tools/x.js', './tools/missing.js'] }));
    fs.symlinkSync(outside, path.join(agentsDir, 'a', 'tools'));
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([
      ['/tools/0', 'path-escape'],
      ['/tools/1', 'path-escape'],
    ]);
  });

  it('rejects a dangling symlink', () => {
    writeAgent('a', minimal('a', { tools: ['./x.js'] }));
    fs.symlinkSync(path.join(outside, 'not-yet.js'), path.join(agentsDir, 'a', 'x.js'));
    expect(loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule])).toEqual([
      ['/tools/0', 'path-escape'],
    ]);
  });

  it('allows symlinks and tool paths that stay inside, including a tool module not written yet', () => {
    writeAgent('a', {
      name: 'a',
      systemFile: 'link.md',
      tools: ['./tools/later.js', './tools/../t.mjs'],
    });
    fs.writeFileSync(path.join(agentsDir, 'a', 'real.md'), 'inside');
    fs.symlinkSync('real.md', path.join(agentsDir, 'a', 'link.md'));
    const { agents, problems } = loadAgents(agentsDir);
    expect(problems).toEqual([]);
    expect(agents[0]?.system).toBe('inside');
  });

  it('loads an agent whose folder is reached through a symlinked agents folder', () => {
    writeAgent('a', { name: 'a', systemFile: 'system.md' });
    fs.writeFileSync(path.join(agentsDir, 'a', 'system.md'), 'ok');
    const linked = path.join(root, 'linked-agents');
    fs.symlinkSync(agentsDir, linked);
    expect(loadAgents(linked).agents.map((a) => a.system)).toEqual(['ok']);
  });
});

describe('AgentRegistry', () => {
  function registry(): AgentRegistry {
    writeAgent('alpha', minimal('alpha'));
    writeAgent('beta', minimal('beta'));
    return new AgentRegistry(loadAgents(agentsDir).agents);
  }

  it('lists, finds and gets agents by name', () => {
    const agents = registry();
    expect(agents.list().map((a) => a.name)).toEqual(['alpha', 'beta']);
    expect(agents.find('beta')?.name).toBe('beta');
    expect(agents.get('alpha').name).toBe('alpha');
    expect(agents.find('gamma')).toBeUndefined();
  });

  it.each([
    'gamma',
    '../x',
    '%2e%2e',
    'alpha\0',
    '\0',
    'a'.repeat(300),
    '',
    'Alpha',
    '__proto__',
    'constructor',
  ])('get(%j) throws AGENT_NOT_FOUND', (name) => {
    const agents = registry();
    expect(agents.find(name)).toBeUndefined();
    let thrown: unknown;
    try {
      agents.get(name);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(CairnError);
    expect(thrown).toMatchObject({ code: 'AGENT_NOT_FOUND', status: 404 });
  });

  it('says how to fix a missing agent', () => {
    expect(() => registry().get('gamma')).toThrow(
      'Agent "gamma" not found. Add agents/gamma/agent.json or check GET /agents.',
    );
  });
});

describe('where a problem is, and what was meant', () => {
  /** The problems of agent `a` written as `text`, as [pointer, rule, line, column]. */
  function placed(text: string): [string, string, number | undefined, number | undefined][] {
    writeAgent('a', text);
    return loadAgents(agentsDir).problems.map((p) => [p.pointer, p.rule, p.line, p.column]);
  }

  it('places a JSON syntax error at its line and column, without the character offset', () => {
    writeAgent('a', '{\n  "name": "a",\n  "system": "x",\n}\n');
    const [problem] = loadAgents(agentsDir).problems;
    expect(problem).toMatchObject({ rule: 'json-parse', line: 4, column: 1 });
    expect(problem?.message).toMatch(/^not valid JSON: /);
    expect(problem?.message).not.toMatch(/position/);
    expect(placed('{\n  "name": "a"\n  "system": "x"\n}')).toEqual([['', 'json-parse', 3, 3]]);
    expect(placed('')).toEqual([['', 'json-parse', 1, 1]]);
  });

  it('places a schema problem at its value, an unknown property at its name', () => {
    expect(
      placed(
        [
          '{',
          '  "name": "a",',
          '  "system": "x",',
          '  "maxIterations": 0,',
          '  "memory": {',
          '    "enabled": "yes",',
          '    "size": 3',
          '  },',
          '  "tools": ["current_time", 7]',
          '}',
        ].join('\n'),
      ),
    ).toEqual([
      ['/maxIterations', 'minimum', 4, 20],
      ['/memory/enabled', 'type', 6, 16],
      ['/memory', 'additionalProperties', 7, 5],
      ['/tools/1', 'type', 9, 29],
    ]);
  });

  it('places a missing required property at the object that lacks it', () => {
    expect(placed('{\n  "name": "a",\n  "system": "x",\n  "daemon": { "every": "1h" }\n}')).toEqual(
      [['/daemon', 'required', 4, 13]],
    );
  });

  it('suggests the property a misspelt one stands for, at any depth, only when close', () => {
    writeAgent(
      'a',
      minimal('a', {
        maxIteration: 3,
        memroy: { enabled: true },
        defaultCompaction: { autothreshold: 80, recall: { maxMesages: 2 } },
        prompt: 'x',
      }),
    );
    expect(loadAgents(agentsDir).problems.map((p) => p.message)).toEqual([
      'must NOT have additional property "maxIteration"; did you mean "maxIterations"?',
      'must NOT have additional property "memroy"; did you mean "memory"?',
      'must NOT have additional property "autothreshold"; did you mean "autoThreshold"?',
      'must NOT have additional property "maxMesages"; did you mean "maxMessages"?',
      'must NOT have additional property "prompt"',
    ]);
  });

  it('checks paths and systemFile even when the schema fails elsewhere', () => {
    expect(
      problemsOf({ systemFile: '../../etc/passwd', maxIteration: 3, tools: ['./../x.js'] }),
    ).toEqual([
      ['/systemFile', 'path-escape'],
      ['', 'additionalProperties'],
      ['/tools/0', 'path-escape'],
    ]);
  });

  it("keeps a rejected file's sound tool entries for the tool check, never an escaping or refused one", () => {
    const file = writeAgent(
      'a',
      minimal('a', {
        maxIteration: 3,
        tools: ['curent_time', './../x.js', 'Bad Tool', { tool: 'ask_user', approval: 'required' }],
      }),
    );
    const { agents, toolLists } = loadAgents(agentsDir);
    expect(agents).toEqual([]);
    expect(toolLists).toHaveLength(1);
    expect(toolLists[0]).toMatchObject({
      file,
      agent: { name: 'a', tools: ['curent_time', 'ask_user'], toolsNeedingApproval: ['ask_user'] },
      entries: [
        { pointer: '/tools/0', line: 1 },
        { pointer: '/tools/3', line: 1 },
      ],
      list: { pointer: '/tools', line: 1 },
    });
  });
});
