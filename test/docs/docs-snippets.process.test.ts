/**
 * The shell snippets of the README and the guide run as
 * written, in order, against a real `cairn serve` with the fake model.
 * Two rewrites only: the documented address http://127.0.0.1:5050 becomes the
 * test server's, and an example session, task or key id stands for the last one
 * the previous snippets printed. `cairn` is the compiled CLI. Snippets marked
 * `<!-- docs-test: skip <reason> -->` are not run (listed in the test name).
 *
 * The fake model answers like the guide's examples: the `planner` of chapter
 * 05 asks where the trip starts, and continues once the answer arrives.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer, type FakeReply } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';
import { shellSnippets } from './markdown-snippets.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOCUMENTED_URL = 'http://127.0.0.1:5050';
/** Example ids in the docs: each stands for the last id of its kind a snippet printed. */
const EXAMPLE_IDS = {
  sess: /sess_[0-9a-f]{24}/g,
  task: /task_[0-9a-f]{24}/g,
  key: /key_[0-9a-f]{24}/g,
};
const FILES = [
  'README.md',
  ...[
    '01-getting-started',
    '02-agents',
    '03-configuration',
    '04-sessions-and-chat',
    '05-tasks',
    '06-subagents-and-daemons',
    '08-memory',
    '09-security',
    '10-openai-api',
    '13-running-several-instances',
    '14-a2a',
    '16-compaction-eval',
  ].map((chapter) => `docs/guide/${chapter}.md`),
];

/** The fake model's replies: what the guide's examples show a model answering. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- the request body as the fake records it
function guideModel(body: any): FakeReply {
  const messages = body.messages as {
    role: string;
    content?: unknown;
    tool_calls?: { function: { name: string } }[];
  }[];
  const system = messages.find((m) => m.role === 'system')?.content;
  const last = messages.at(-1);
  if (typeof system === 'string' && system.includes('You plan trips')) {
    if (last?.role === 'tool') {
      const call = messages.findLast((m) => m.tool_calls)?.tool_calls?.[0]?.function.name;
      if (call === 'agent_helper') return { content: `The helper says: ${String(last.content)}` };
      if (call === 'book_hotel') {
        // Chapter 05: Lyon first, then Annecy, then a word on how it went.
        const bookings = messages.filter((m) => m.role === 'tool').length;
        return bookings === 1
          ? { tool_calls: [{ name: 'book_hotel', arguments: '{"city":"Annecy"}' }] }
          : { content: `Lyon is booked; Annecy is not: ${String(last.content)}` };
      }
      return { content: `Starting from ${String(last.content)}: day 1 …` };
    }
    if (String(last?.content).startsWith('Book hotels')) {
      return { tool_calls: [{ name: 'book_hotel', arguments: '{"city":"Lyon"}' }] };
    }
    if (String(last?.content).includes('language')) {
      return {
        tool_calls: [
          { name: 'agent_helper', arguments: JSON.stringify({ input: String(last?.content) }) },
        ],
      };
    }
    return {
      tool_calls: [
        {
          name: 'ask_user',
          arguments: JSON.stringify({ question: 'Which city should the trip start from?' }),
        },
      ],
    };
  }
  if (typeof system === 'string' && system.includes('You answer factual questions')) {
    return { content: 'French.' };
  }
  return { content: 'Hello Ada.' };
}

interface Run {
  code: number;
  output: string;
}

const GUIDE = readdirSync(join(ROOT, 'docs/guide'))
  .filter((name) => name.endsWith('.md'))
  .map((name) => `docs/guide/${name}`);

describe('the docs the test covers', () => {
  it('include every chapter that has a shell snippet', () => {
    const withSnippets = GUIDE.filter(
      (file) => shellSnippets(readFileSync(join(ROOT, file), 'utf8')).length > 0,
    );
    expect(withSnippets.filter((file) => !FILES.includes(file))).toEqual([]);
  });
});

describe('docs snippets run as written', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  let env: Record<string, string>;
  /** The last session and task id a snippet printed: what the docs' example ids stand for. */
  const lastIds: Partial<Record<keyof typeof EXAMPLE_IDS, string>> = {};

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault(guideModel);
    home = makeHome({}, fake.baseURL);
    server = await spawnServer({ home });
    const bin = join(home, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'cairn'), `#!/bin/sh\nexec '${process.execPath}' '${CLI_PATH}' "$@"\n`);
    chmodSync(join(bin, 'cairn'), 0o755);
    env = {
      PATH: `${bin}:${process.env.PATH ?? ''}`,
      CAIRN_URL: server.url,
      CAIRN_HOME: home,
    };
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  function run(code: string): Promise<Run> {
    return new Promise((resolve) => {
      const child = execFile(
        'bash',
        ['--norc', '--noprofile', '-eo', 'pipefail', '-c', code],
        { cwd: home, env, timeout: 30_000, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout, stderr) =>
          resolve({
            code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
            output: stdout + stderr,
          }),
      );
      child.stdin?.end();
    });
  }

  for (const file of FILES) {
    const snippets = shellSnippets(readFileSync(join(ROOT, file), 'utf8'));
    const skipped = snippets.filter((s) => s.skip).map((s) => `${s.line} (${s.skip})`);
    it(`${file}: every snippet in order${skipped.length > 0 ? `; skipped: ${skipped.join(', ')}` : ''}`, async () => {
      expect(snippets.some((s) => !s.skip)).toBe(true);
      for (const snippet of snippets) {
        if (snippet.skip) continue;
        let code = snippet.code.replaceAll(DOCUMENTED_URL, server.url);
        for (const [kind, pattern] of Object.entries(EXAMPLE_IDS)) {
          if (!code.match(pattern)) continue;
          const last = lastIds[kind as keyof typeof EXAMPLE_IDS];
          expect(
            last,
            `${file}:${snippet.line} uses a ${kind} id no earlier snippet printed`,
          ).toBeDefined();
          code = code.replace(pattern, last!);
        }
        const result = await run(code);
        const where = `${file}:${snippet.line}\n${code}\n---\n${result.output}`;
        expect(result.code, where).toBe(0);
        expect(result.output, where).not.toMatch(/"error":\s*\{\s*"code"/);
        expect(result.output, where).not.toMatch(/"status":\s*"failed"/);
        if (process.env.DOCS_TEST_PRINT) console.log(where);
        for (const [kind, pattern] of Object.entries(EXAMPLE_IDS)) {
          const printed = result.output.match(pattern)?.at(-1);
          if (printed) lastIds[kind as keyof typeof EXAMPLE_IDS] = printed;
        }
      }
    });
  }
});
