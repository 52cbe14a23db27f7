/**
 * The shell snippets of the README and of every guide chapter run as written,
 * in order, against a real `cairn serve` with no model configured, so the
 * built-in offline model answers, as it does for a reader who pastes them
 * after `npm start`. Each file's output must also show what its text says
 * happened (OFFLINE_SHOWS: the question asked, the tool called…), not merely
 * no error. The chapters whose text shows what a tool-calling model decides by
 * itself (FAKE_MODEL_CHAPTERS) run a second time against a server whose model
 * is the fake OpenAI server (test/fakes/), scripted to answer as the text says
 * a model would.
 *
 * One rewrite only: the documented address http://127.0.0.1:5050 becomes the
 * test server's; a command naming a fixed session, task or key id fails the
 * test, since pasted it would answer 404. `cairn` is the compiled CLI.
 *
 * Markers, on the lines right before a fence (test/docs/markdown-snippets.ts):
 *
 * - `<!-- docs-test: skip <reason> -->`: the snippet cannot run here (it
 *   installs, starts a server of its own, needs a real provider or Docker,
 *   streams until stopped); the reason is required and shows in the test name.
 * - `<!-- docs-test: expect-error <CODE> -->`: the snippet shows an error; its
 *   output must name that code (Cairn's code or a JSON-RPC one) instead of
 *   being free of errors.
 * - `<!-- docs-test: output -->`, before the fence that follows a snippet: that
 *   fence is the snippet's output as the offline model prints it, compared line
 *   by line (for output with nothing that varies from run to run).
 *
 * `curl` is the real one behind a wrapper that notes the status of every
 * answer. A snippet fails on an HTTP 4xx/5xx, on Cairn's error envelope in its
 * output (a JSON-RPC error has the same shape), on a failed task, on a
 * non-zero exit, and on two answers run together on one line (as they would
 * be in a terminal: end the first with `-w '\n'`), unless it is marked
 * expect-error.
 *
 * A shell variable a snippet sets (`TASK=$(curl …)`) is there for the later
 * snippets of its file, as in one terminal; each file starts with none, as a
 * reader who opens it first would.
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
const GUIDE = readdirSync(join(ROOT, 'docs/guide'))
  .filter((name) => name.endsWith('.md'))
  .sort()
  .map((name) => `docs/guide/${name}`);
const snippetsOf = (file: string): ShellSnippet[] =>
  shellSnippets(readFileSync(join(ROOT, file), 'utf8'));
/** The README and every chapter with a shell snippet: none can be left out. */
const FILES = ['README.md', ...GUIDE.filter((file) => snippetsOf(file).length > 0)];

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
 * What each file's output must show with the offline model: the walkthrough
 * happened, not merely no error. A file not listed must only run cleanly.
 */
const OFFLINE_SHOWS: Record<string, readonly string[]> = {
  // The compaction examples' counts, as the text shows them after its turns.
  'README.md': [
    '"reply":"[offline model] You said: \\"Hello! My name is Ada',
    '"compactedCount":2,"newSize":2,"alreadyUpToDate":false',
    '"compact_size":2,"compact_count":50,"compaction_count":1,"compact_seq":3',
  ],
  'docs/guide/08-memory.md': [
    '"compactedCount":4,"newSize":4,"alreadyUpToDate":false',
    '"message_count":7,',
  ],
  'docs/guide/04-sessions-and-chat.md': ['exported 1 message of sess_', '(1 message)'],
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
  'docs/guide/14-a2a.md': [
    '"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":',
    '"parts":[{"text":"Which city should the trip start from?"}]',
    'I called ask_user {\\"question\\":\\"Which city should the trip start from?\\"}; it returned: Lyon.',
    '"arguments":"{\\"city\\":\\"Lyon\\"}"',
    '"arguments":"{\\"city\\":\\"Annecy\\"}"',
    'it returned: Booked a room in Lyon. I called book_hotel {\\"city\\":\\"Annecy\\"}; it returned: A person denied this tool call; it was not run. Their reason: not this month.',
    '"state":"TASK_STATE_COMPLETED"',
  ],
};

/**
 * The chapters that also run against the fake model: their text shows what a
 * tool-calling model decides by itself (to ask, to call the helper, to book one
 * city after the other), which the offline model does only when told to.
 */
const FAKE_MODEL_CHAPTERS = [
  'docs/guide/05-tasks.md',
  'docs/guide/06-subagents-and-daemons.md',
  'docs/guide/14-a2a.md',
];

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
  // What follows the end of a JSON answer on its line is the next answer or command's output.
  const runTogether = /[}\]](?:\{"|[a-z]{2,} )/.exec(run.output);
  if (runTogether) {
    return `two outputs run together on one line at …${run.output.slice(Math.max(0, runTogether.index - 40), runTogether.index + 40)}… (end the answer with -w '\\n')`;
  }
  return null;
}

/** Output lines without the spaces a terminal does not show at their ends. */
const trimLines = (text: string): string => text.replace(/[ \t]+$/gm, '').trim();

/**
 * Runs a file's snippets in order from a clean slate; returns their output.
 * With `compareOutput` (the offline model), a snippet's marked output must be what it printed.
 */
async function runChapter(
  file: string,
  home: string,
  url: string,
  env: Record<string, string>,
  { compareOutput = true } = {},
) {
  rmSync(join(home, VARS_FILE), { force: true });
  let output = '';
  for (const snippet of snippetsOf(file)) {
    if (snippet.skip) continue;
    expect(snippet.code, `${file}:${snippet.line} uses a fixed id`).not.toMatch(FIXED_ID);
    const code = snippet.code.replaceAll(DOCUMENTED_URL, url);
    const run = await runSnippet(code, home, env);
    const where = `${file}:${snippet.line}\n${code}\n---\n${run.output}\n--- answers\n${run.answers.join('\n')}`;
    if (process.env.DOCS_TEST_PRINT) console.log(where);
    expect(unexpected(snippet, run), where).toBeNull();
    if (compareOutput && snippet.output !== undefined) {
      expect(trimLines(run.output), `${file}:${snippet.line}: the output the text shows`).toBe(
        trimLines(snippet.output),
      );
    }
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

/** `file: every snippet in order`, with what was skipped and why. */
function testName(file: string, snippets: ShellSnippet[], what: string): string {
  const skipped = snippets.filter((s) => s.skip).map((s) => `${s.line} (${s.skip})`);
  return `${file}: ${what}${skipped.length > 0 ? `; skipped: ${skipped.join(', ')}` : ''}`;
}

describe('the docs the test covers', () => {
  it('are the README and every chapter with a shell snippet, each with one it runs', () => {
    expect(FILES).toContain('docs/guide/14-a2a.md');
    for (const file of FILES)
      expect(
        snippetsOf(file).some((s) => !s.skip),
        file,
      ).toBe(true);
    for (const file of [...Object.keys(OFFLINE_SHOWS), ...FAKE_MODEL_CHAPTERS]) {
      expect(FILES).toContain(file);
    }
  });
});

describe('every snippet as written, with the offline model', () => {
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

  for (const file of FILES) {
    const shows = OFFLINE_SHOWS[file] ?? [];
    it(
      testName(file, snippetsOf(file), 'every snippet in order shows what the text says'),
      async () => {
        const output = await runChapter(file, home, server.url, env);
        for (const text of shows) expect(output).toContain(text);
      },
    );
  }
});

describe('the chapters that show a tool-calling model, with the fake model', () => {
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

  for (const file of FAKE_MODEL_CHAPTERS) {
    it(testName(file, snippetsOf(file), 'every snippet in order'), async () => {
      const output = await runChapter(file, home, server.url, env, { compareOutput: false });
      expect(output).not.toContain('[offline model]');
    });
  }
});
