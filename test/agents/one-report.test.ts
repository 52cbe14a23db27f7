/**
 * One report for every problem of an agent file: its schema problems and its
 * tool problems together (a typo in a field never hides a typo in a tool
 * name), each at its line and column, with the name that was likely meant.
 * Real files, the real tool catalog, and the server's own reload route.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { checkAgentTools } from '../../src/agents/check-agent-tools.js';
import { formatProblem, loadAgents, orderProblems } from '../../src/agents/load-agents.js';
import { builtinTools } from '../../src/tools/builtins/index.js';
import { ToolCatalog } from '../../src/tools/tool-catalog.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

let root: string;
beforeEach(() => {
  root = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-one-report-'));
});
afterEach(() => fs.rmSync(root, { recursive: true, force: true }));

/** agents/<name>/agent.json as exactly this text. */
function writeAgentText(agentsDir: string, name: string, text: string): string {
  fs.mkdirSync(path.join(agentsDir, name), { recursive: true });
  const file = path.join(agentsDir, name, 'agent.json');
  fs.writeFileSync(file, text);
  return file;
}

const TYPOS = [
  '{',
  '  "name": "typos",',
  '  "system": "x",',
  '  "maxIteration": 3,',
  '  "tools": ["curent_time", "ask_user", "./tools/missing.js", "history_serch"]',
  '}',
].join('\n');

async function report(agentsDir: string): Promise<string[]> {
  const { problems, toolLists } = loadAgents(agentsDir);
  const catalog = new ToolCatalog({ builtins: builtinTools() });
  const toolProblems = await checkAgentTools(toolLists, (agent) => catalog.forAgent(agent));
  return orderProblems([...problems, ...toolProblems]).map(formatProblem);
}

describe('one report per agent file', () => {
  it('names a field typo and every tool typo of a file in the same run, in file order', async () => {
    const agentsDir = path.join(root, 'agents');
    const file = writeAgentText(agentsDir, 'typos', TYPOS);
    const lines = await report(agentsDir);
    expect(lines).toEqual([
      `${file}:4:3: must NOT have additional property "maxIteration"; did you mean "maxIterations"? (additionalProperties)`,
      expect.stringMatching(
        new RegExp(
          `^${file}:5:13: /tools/0 Agent "typos" lists unknown tool "curent_time"\\. Did you mean "current_time"\\? Built-in tools: .* \\(tool\\)$`,
        ),
      ),
      `${file}:5:40: /tools/2 Agent "typos": tool module ./tools/missing.js does not exist. (tool)`,
      expect.stringMatching(
        new RegExp(`^${file}:5:62: /tools/3 .*"history_serch"\\. Did you mean "history_search"\\?`),
      ),
    ]);
  });

  it('reports a tool typo of a loaded agent at its entry; no suggestion for a name far from any', async () => {
    const agentsDir = path.join(root, 'agents');
    const file = writeAgentText(
      agentsDir,
      'ok',
      JSON.stringify({ name: 'ok', system: 'x', tools: ['current_time', 'weather'] }, null, 2),
    );
    const lines = await report(agentsDir);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^${file}:6:5: /tools/1 .*unknown tool "weather"\\. Built-in`),
    );
    expect(lines[0]).not.toMatch(/Did you mean/);
  });

  it('POST /agents/reload reports both at once, and a lookup says the server reloads the file by itself', async () => {
    let t: TestApp | undefined;
    try {
      t = await startTestApp({ fake: null });
      const file = writeAgentText(path.join(t.home, 'agents'), 'typos', TYPOS);
      const res = await t.app.server.inject({ method: 'POST', url: '/agents/reload' });
      expect(res.statusCode).toBe(200);
      const problems = res.json<{ problems: string[] }>().problems;
      expect(problems.map((line) => line.slice(0, line.indexOf(' ')))).toEqual([
        `${file}:4:3:`,
        `${file}:5:13:`,
        `${file}:5:40:`,
        `${file}:5:62:`,
      ]);

      const lookup = await t.app.server.inject({ method: 'GET', url: '/agents/typos' });
      expect(lookup.statusCode).toBe(404);
      const error = lookup.json<{ error: { code: string; message: string } }>().error;
      expect(error.code).toBe('AGENT_NOT_FOUND');
      expect(error.message).toContain('line 4, column 3');
      expect(error.message).toContain('did you mean "maxIterations"?');
      expect(error.message).toMatch(/reloads it by itself/);
      expect(error.message).not.toMatch(/restart/);
    } finally {
      await t?.close();
    }
  });

  it('the demo agent of the test harness still loads clean', async () => {
    const agentsDir = path.join(root, 'agents');
    writeAgentText(agentsDir, 'assistant', JSON.stringify(TEST_AGENT));
    expect(await report(agentsDir)).toEqual([]);
  });
});
