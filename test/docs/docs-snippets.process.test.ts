/**
 * The shell snippets of the README and the guide run as
 * written, in order, against a real `cairn serve` with the fake model.
 * One rewrite only: the documented address http://127.0.0.1:5050 becomes the
 * test server's; a command naming a fixed session, task or key id fails the
 * test, since pasted it would answer 404. `cairn` is the compiled CLI. Snippets
 * marked `<!-- docs-test: skip <reason> -->` are not run (listed in the test
 * name).
 *
 * `curl` is the real one behind a wrapper that notes the status of every
 * answer. A snippet fails on an HTTP 4xx/5xx, on Cairn's error envelope in its
 * output (a JSON-RPC error has the same shape), on a failed task and on a
 * non-zero exit, unless it is marked `<!-- docs-test: expect-error <CODE> -->`:
 * then its output must carry that error code instead.
 *
 * The fake model answers like the guide's examples: the `planner` of chapter
 * 05 asks where the trip starts, and continues once the answer arrives.
 *
 * A shell variable a snippet sets (`TASK=$(curl …)`) is there for the later
 * snippets of its chapter, as in one terminal; each chapter starts with none,
 * as a reader who opens it first would. The chapters whose walkthroughs use tools
 * (05–07) run a second time against a server with no model configured, so
 * the built-in offline model answers: what they tell the reader to type
 * makes it ask, wait for approval and call tools as the text says.
 */
import { execFile } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer, type FakeReply } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';
import { shellSnippets, type ShellSnippet } from './markdown-snippets.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DOCUMENTED_URL = 'http://127.0.0.1:5050';
/** An id as Cairn prints it: fine in an example of output, never in a command. */
const FIXED_ID = /\b(sess|task|key)_[0-9a-f]{24}\b/;
const FILES = [
  'README.md',
  ...[
    '01-getting-started',
    '02-agents',
    '03-configuration',
    '04-sessions-and-chat',
    '05-tasks',
    '06-subagents-and-daemons',
    '07-tools',
    '08-memory',
    '09-security',
    '10-openai-api',
    '13-running-several-instances',
    '14-a2a',
    '15-observing-cairn',
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

/**
 * The chapters run again with the offline model, each with what its output
 * must show: the walkthrough happened, not merely no error.
 */
const OFFLINE_FILES: Record<string, readonly string[]> = {
  'docs/guide/05-tasks.md': [
    '"status":"waiting","input":"Plan a three-day trip. Ask me: Which city should the trip start from?"',
    'it returned: Lyon.',
    '"pending_arguments":"{\\"city\\":\\"Lyon\\"}"',
    '"pending_arguments":"{\\"city\\":\\"Annecy\\"}"',
    'it returned: Booked a room in Lyon. I called book_hotel {\\"city\\":\\"Annecy\\"}; it returned: A person denied this tool call; it was not run. Their reason: not this month.',
  ],
  'docs/guide/06-subagents-and-daemons.md': [
    'I called agent_helper {\\"input\\":\\"Which language do they speak in Lyon?\\"}; it returned: [offline model] You said:',
    '"mode":"subagent"',
  ],
  'docs/guide/07-tools.md': ['I called current_time {}; it returned: {\\"iso\\":'],
};

/** Variables a snippet assigns at the start of a line (`TASK=$(…)`). */
function assignedVariables(code: string): string[] {
  return [
    ...new Set([...code.matchAll(/^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]!)),
  ];
}

interface Run {
  code: number;
  output: string;
  /** `<status> <method> <url>` of every answer curl got. */
  answers: string[];
}

const VARS_FILE = '.docs-test-vars';
const HTTP_LOG = '.docs-test-http';

/** Runs `code` in bash with the variables earlier snippets set, and keeps the ones it sets. */
function runSnippet(code: string, cwd: string, env: Record<string, string>): Promise<Run> {
  const vars = join(cwd, VARS_FILE);
  const log = join(cwd, HTTP_LOG);
  rmSync(log, { force: true });
  const saved = assignedVariables(code);
  const script = [
    // stderr through a pipe, as on a terminal `tee /dev/stderr` can open it (Node's is a socket)
    'exec 2> >(cat >&2)',
    `if [ -f '${vars}' ]; then . '${vars}'; fi`,
    code,
    ...(saved.length > 0 ? [`declare -p ${saved.join(' ')} >> '${vars}'`] : []),
  ].join('\n');
  return new Promise((resolve) => {
    const child = execFile(
      'bash',
      ['--norc', '--noprofile', '-eo', 'pipefail', '-c', script],
      {
        cwd,
        env: { ...env, DOCS_TEST_HTTP_LOG: log },
        timeout: 30_000,
        maxBuffer: 16 * 1024 * 1024,
      },
      (error, stdout, stderr) =>
        resolve({
          code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
          output: stdout + stderr,
          answers: existsSync(log) ? readFileSync(log, 'utf8').split('\n').filter(Boolean) : [],
        }),
    );
    child.stdin?.end();
  });
}

/**
 * What a run must show: no error it does not expect, or the one it expects.
 * Returns the failure, or null.
 */
function unexpected(snippet: ShellSnippet, run: Run): string | null {
  if (snippet.expectError) {
    const code = snippet.expectError;
    const named = new RegExp(`"code":\\s*"?${code}"?[,}]|error ${code}:`);
    return named.test(run.output) ? null : `expected the error ${snippet.expectError}`;
  }
  if (run.code !== 0) return `exit code ${run.code}`;
  const failed = run.answers.filter((answer) => Number(answer.split(' ')[0]) >= 400);
  if (failed.length > 0) return `HTTP errors: ${failed.join('; ')}`;
  if (/"error":\s*\{\s*"code"/.test(run.output)) return 'an error envelope in the output';
  if (/"status":\s*"failed"/.test(run.output)) return 'a failed task in the output';
  return null;
}

/** Runs a chapter's snippets in order from a clean slate; returns their output. */
async function runChapter(file: string, home: string, url: string, env: Record<string, string>) {
  rmSync(join(home, VARS_FILE), { force: true });
  let output = '';
  for (const snippet of shellSnippets(readFileSync(join(ROOT, file), 'utf8'))) {
    if (snippet.skip) continue;
    expect(snippet.code, `${file}:${snippet.line} uses a fixed id`).not.toMatch(FIXED_ID);
    const code = snippet.code.replaceAll(DOCUMENTED_URL, url);
    const run = await runSnippet(code, home, env);
    const where = `${file}:${snippet.line}\n${code}\n---\n${run.output}\n--- answers\n${run.answers.join('\n')}`;
    if (process.env.DOCS_TEST_PRINT) console.log(where);
    expect(unexpected(snippet, run), where).toBeNull();
    output += run.output;
  }
  return output;
}

/** The first `curl` on PATH: the one the wrapper runs. */
function realCurl(): string {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, 'curl'))) return join(dir, 'curl');
  }
  throw new Error('the docs test needs curl');
}

/**
 * curl as the snippets call it, each answer's status written to
 * $DOCS_TEST_HTTP_LOG: a `-w` of the snippet's own comes first, the status goes
 * to stderr after it and is taken out of what the snippet prints there.
 */
const CURL_WRAPPER = (curl: string) => `#!/bin/bash
args=() format=''
while [ $# -gt 0 ]; do
  case $1 in
    -w | --write-out) format=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
exec 3>&1
'${curl}' "\${args[@]}" -w "$format%{stderr}@@docs-test-http %{http_code} %{method} %{url_effective}\\n" 2>&1 1>&3 3>&- |
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in
      *'@@docs-test-http '*)
        before=\${line%%@@docs-test-http *}
        if [ -n "$before" ]; then printf '%s\\n' "$before" >&2; fi
        printf '%s\\n' "\${line#*@@docs-test-http }" >> "$DOCS_TEST_HTTP_LOG" ;;
      *) printf '%s\\n' "$line" >&2 ;;
    esac
  done
exit "\${PIPESTATUS[0]}"
`;

/** `home/bin/cairn`: the compiled CLI, as `npm link` would install it; `home/bin/curl`: the wrapper. */
function cliEnv(home: string, url: string): Record<string, string> {
  const bin = join(home, 'bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'cairn'), `#!/bin/sh\nexec '${process.execPath}' '${CLI_PATH}' "$@"\n`);
  chmodSync(join(bin, 'cairn'), 0o755);
  writeFileSync(join(bin, 'curl'), CURL_WRAPPER(realCurl()));
  chmodSync(join(bin, 'curl'), 0o755);
  return { PATH: `${bin}:${process.env.PATH ?? ''}`, CAIRN_URL: url, CAIRN_HOME: home };
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
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault(guideModel);
    home = makeHome({}, fake.baseURL);
    server = await spawnServer({ home });
    env = cliEnv(home, server.url);
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  for (const file of FILES) {
    const snippets = shellSnippets(readFileSync(join(ROOT, file), 'utf8'));
    const skipped = snippets.filter((s) => s.skip).map((s) => `${s.line} (${s.skip})`);
    it(`${file}: every snippet in order${skipped.length > 0 ? `; skipped: ${skipped.join(', ')}` : ''}`, async () => {
      expect(snippets.some((s) => !s.skip)).toBe(true);
      await runChapter(file, home, server.url, env);
    });
  }
});

describe('the tool walkthroughs as written, with the offline model', () => {
  let home: string;
  let server: ServerProcess;
  let env: Record<string, string>;

  beforeAll(async () => {
    home = makeHome({}, null);
    server = await spawnServer({ home });
    env = cliEnv(home, server.url);
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    rmSync(home, { recursive: true, force: true });
  });

  for (const [file, expected] of Object.entries(OFFLINE_FILES)) {
    it(`${file}: every snippet in order shows what the text says`, async () => {
      const output = await runChapter(file, home, server.url, env);
      expect(output).toContain('[offline model]');
      for (const text of expected) expect(output).toContain(text);
    });
  }
});
