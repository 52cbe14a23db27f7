/**
 * Issue 11 item 7: the shell snippets of the README and the guide run as
 * written, in order, against a real `cairn serve` with the fake model.
 * Two rewrites only: the documented address http://127.0.0.1:5050 becomes the
 * test server's, and an example session or task id stands for the last one
 * the previous snippets printed. `cairn` is the compiled CLI. Snippets marked
 * `<!-- docs-test: skip <reason> -->` are not run (listed in the test name).
 *
 * First slice: README.md and guide chapters 01, 02, 04 and 10.
 */
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';
import { shellSnippets } from './markdown-snippets.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOCUMENTED_URL = 'http://127.0.0.1:5050';
/** Example ids in the docs: each stands for the last id of its kind a snippet printed. */
const EXAMPLE_IDS = { sess: /sess_[0-9a-f]{24}/g, task: /task_[0-9a-f]{24}/g };
const FILES = [
  'README.md',
  ...['01-getting-started', '02-agents', '04-sessions-and-chat', '10-openai-api'].map(
    (chapter) => `docs/guide/${chapter}.md`,
  ),
];

interface Run {
  code: number;
  output: string;
}

describe('docs snippets run as written', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  let env: Record<string, string>;
  /** The last session and task id a snippet printed: what the docs' example ids stand for. */
  const lastIds: Partial<Record<keyof typeof EXAMPLE_IDS, string>> = {};

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault(() => ({ content: 'Hello Ada.' }));
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
        for (const [kind, pattern] of Object.entries(EXAMPLE_IDS)) {
          const printed = result.output.match(pattern)?.at(-1);
          if (printed) lastIds[kind as keyof typeof EXAMPLE_IDS] = printed;
        }
      }
    });
  }
});
