/**
 * CLI bugs found in day-to-day use, reproduced with the compiled bin in child
 * processes against a real server: chat never drops a line and exits 0 at end
 * of input, shows questions, tool calls and results and automatic
 * compactions; contradicting flags are refused; `agents validate` runs the
 * start-up tool checks; start-up and network errors are one line that says
 * what to fix.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type Server } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cairn …` with only the variables we pass; `stdin` is written and closed. */
function cairn(args: string[], env: Record<string, string>, stdin = ''): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI_PATH, ...args],
      {
        env: { PATH: process.env.PATH ?? '', ...env },
        timeout: 20_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    child.stdin?.end(stdin);
  });
}

/** Runs `cairn …` under `script`, so its stdout and stderr are a terminal; returns what it printed. */
function cairnOnTerminal(args: string[]): Promise<string> {
  const command = [process.execPath, CLI_PATH, ...args].map((a) => `'${a}'`).join(' ');
  return new Promise((resolve, reject) => {
    execFile(
      'script',
      ['-qec', command, '/dev/null'],
      { env: { PATH: process.env.PATH ?? '' }, timeout: 30_000, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout) =>
        error ? reject(new Error(`${error.message}\n${stdout}`)) : resolve(stdout),
    );
  });
}

interface StoredMessage {
  role: string;
  content: string | null;
}

const ASKING_AGENT = {
  ...TEST_AGENT,
  name: 'asker',
  tools: ['ask_user', 'current_time'],
};
const AUTO_AGENT = {
  ...TEST_AGENT,
  name: 'auto',
  defaultCompaction: { autoThreshold: 50 },
};
/** About `n` tokens of text. */
const words = (n: number, tag: string): string => `${tag} ${'word '.repeat(n)}`.trim();

describe('cairn chat against a running server', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome(
      {
        agents: { assistant: TEST_AGENT, asker: ASKING_AGENT, auto: AUTO_AGENT },
        mainModel: { contextWindow: 2_000 },
      },
      fake.baseURL,
    );
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  async function userMessages(sessionId: string): Promise<string[]> {
    const res = await fetch(`${server.url}/sessions/${sessionId}/messages`);
    const body = (await res.json()) as { messages: StoredMessage[] };
    return body.messages.filter((m) => m.role === 'user').map((m) => String(m.content));
  }
  const sessionOf = (stdout: string): string => /session: (sess_\w+)/.exec(stdout)?.[1] ?? '';

  it('sends every piped line in order and exits 0 at end of input', async () => {
    fake.reset();
    fake.setDefault(() => ({ content: 'ok' }));
    const run = await cairn(['chat', 'assistant'], { CAIRN_URL: server.url }, 'one\n\ntwo\nthree');
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(await userMessages(sessionOf(run.stdout))).toEqual(['one', 'two', 'three']);
  });

  it('exits 0 with nothing sent when stdin is already at end of input', async () => {
    fake.reset();
    const run = await cairn(['chat', 'assistant'], { CAIRN_URL: server.url }, '');
    expect(run.code).toBe(0);
    expect(fake.requests).toHaveLength(0);
  });

  it('queues a line typed while a reply is still running and sends it next', async () => {
    fake.reset();
    fake.script({ content: 'slow answer', delayMs: 800 }, { content: 'second answer' });
    const child = spawn(process.execPath, [CLI_PATH, 'chat', 'assistant'], {
      env: { PATH: process.env.PATH ?? '', CAIRN_URL: server.url },
    });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    child.stdin.write('first\n');
    // The first reply is being produced now: type the next line meanwhile.
    await expect.poll(() => fake.requests.length, { timeout: 10_000 }).toBe(1);
    child.stdin.write('second\n');
    child.stdin.end();
    expect(await exited).toBe(0);
    expect(stdout).toContain('slow answer');
    expect(stdout).toContain('second answer');
    expect(await userMessages(sessionOf(stdout))).toEqual(['first', 'second']);
  });

  it('shows tool calls, their results and a question asked with ask_user', async () => {
    fake.reset();
    fake.script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which city do you mean?"}' }] },
      { content: 'Lisbon it is.' },
    );
    const run = await cairn(['chat', 'asker'], { CAIRN_URL: server.url }, 'weather?\nLisbon\n');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('[tool current_time({})]');
    expect(run.stdout).toMatch(/\[result current_time: .+\]/);
    expect(run.stdout).toContain('[question] Which city do you mean?');
    expect(run.stdout).toContain('Lisbon it is.');
  });

  it('says when an automatic compaction ran during the turn, and what it cost', async () => {
    fake.reset();
    fake.setDefault((body) =>
      isSummaryRequest(body)
        ? { content: 'A summary.', usage: { prompt_tokens: 321, completion_tokens: 45 } }
        : { content: 'Noted.' },
    );
    // Three turns of ~250 tokens stay under 50% of 2 000; the fourth crosses it.
    let sessionId: string | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${server.url}/agents/auto/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message: words(250, `m${i}`), ...(sessionId ? { sessionId } : {}) }),
      });
      const body = (await res.json()) as { sessionId: string; compaction: unknown };
      expect(body.compaction).toBeNull();
      sessionId = body.sessionId;
    }
    const run = await cairn(
      ['chat', 'auto', '--session', sessionId!],
      { CAIRN_URL: server.url },
      `${words(300, 'last')}\n`,
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(
      /\[compacted \d+ earlier messages automatically \(1 run, 321 in \/ 45 out tokens\)\]/,
    );
  });

  it('compact with contradicting flags changes nothing on the server', async () => {
    fake.reset();
    fake.setDefault(() => ({ content: 'A summary.' }));
    let sessionId: string | undefined;
    for (const message of ['one', 'two', 'three']) {
      const res = await fetch(`${server.url}/agents/assistant/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message, ...(sessionId ? { sessionId } : {}) }),
      });
      sessionId = ((await res.json()) as { sessionId: string }).sessionId;
    }
    const compacted = await cairn(['compact', sessionId!], { CAIRN_URL: server.url });
    expect(compacted.code).toBe(0);
    const pointer = async () => {
      const res = await fetch(`${server.url}/sessions/${sessionId}`);
      const { session } = (await res.json()) as {
        session: { compact_size: number; compaction_count: number; compact_summary: string };
      };
      return [session.compact_size, session.compaction_count, session.compact_summary];
    };
    const before = await pointer();
    expect(before[0]).toBeGreaterThan(0);
    const requests = fake.requests.length;
    for (const flags of [
      ['--dry-run', '--undo'],
      ['--undo', '--instructions', 'keep amounts'],
    ]) {
      const run = await cairn(['compact', sessionId!, ...flags], { CAIRN_URL: server.url });
      expect(run.code, flags.join(' ')).toBe(1);
      expect(run.stderr).toMatch(/--undo cannot be combined with --(dry-run|instructions)/);
    }
    expect(await pointer()).toEqual(before);
    expect(fake.requests).toHaveLength(requests);
  });

  it('sessions export and import: a large session round-trips with a progress bar on a terminal', async () => {
    // A session of 1 200 messages (~1.3 MB), written as an export file by hand.
    const now = new Date().toISOString();
    const lines = [
      JSON.stringify({
        type: 'session',
        format: 'cairn.session',
        version: 1,
        session: {
          agent_name: 'assistant',
          mode: 'chat',
          status: 'active',
          title: 'big',
          created_at: now,
          updated_at: now,
        },
      }),
      ...Array.from({ length: 1_200 }, (_, i) =>
        JSON.stringify({
          type: 'message',
          message: {
            seq: i + 1,
            role: i === 0 ? 'system' : i % 2 === 1 ? 'user' : 'assistant',
            content: `line ${i} ${'x'.repeat(1_000)}`,
            created_at: now,
          },
        }),
      ),
    ];
    const source = join(home, 'big.ndjson');
    writeFileSync(source, `${lines.join('\n')}\n`);

    // Under `script`, stderr is a terminal: the bar is drawn.
    const imported = await cairnOnTerminal(['sessions', 'import', source, '--url', server.url]);
    expect(imported).toMatch(/\[#+\.*\] \d+% \d+\/\d+ bytes/);
    const id = /imported .* as (sess_\w+) \(1200 messages\)/.exec(imported)?.[1];
    expect(id).toBeDefined();

    const target = join(home, 'copy.ndjson');
    const exported = await cairnOnTerminal([
      'sessions',
      'export',
      id!,
      '-o',
      target,
      '--url',
      server.url,
    ]);
    expect(exported).toMatch(/\[#+\] 100% 1199\/1200 messages|\[#+\.*\] \d+% \d+\/1200 messages/);
    expect(exported).toContain(`exported 1200 messages of ${id}`);
    const copy = readFileSync(target, 'utf8').trimEnd().split('\n');
    expect(copy).toHaveLength(1_201);
    expect(copy.slice(1).map((l) => JSON.parse(l).message.content)).toEqual(
      lines.slice(1).map((l) => JSON.parse(l).message.content),
    );

    // Piped (no terminal): no bar, the NDJSON on stdout.
    const piped = await cairn(['sessions', 'export', id!], { CAIRN_URL: server.url });
    expect(piped.code).toBe(0);
    expect(piped.stdout.trimEnd().split('\n')).toHaveLength(1_201);
    expect(piped.stderr).not.toContain('[#');
  });

  it('sessions import of a missing file says which file', async () => {
    const run = await cairn(['sessions', 'import', join(home, 'nope.ndjson')], {
      CAIRN_URL: server.url,
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('nope.ndjson');
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('accepts --url without a scheme', async () => {
    const run = await cairn(['sessions', '--url', server.url.replace('http://', '')], {});
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('sess_');
  });
});

describe('cairn serve keeps agents live', () => {
  it('picks up a new agent file and an edit of it without a restart or a request', async () => {
    const home = makeHome({}, null);
    const server = await spawnServer({ home });
    try {
      const file = join(home, 'agents', 'newcomer', 'agent.json');
      const write = (description: string) => {
        mkdirSync(dirname(file), { recursive: true });
        writeFileSync(file, JSON.stringify({ ...TEST_AGENT, name: 'newcomer', description }));
      };
      const described = async (): Promise<string | number> => {
        const res = await fetch(`${server.url}/agents/newcomer`);
        if (res.status !== 200) return res.status;
        const body = (await res.json()) as { agent: { description: string } };
        return body.agent.description;
      };
      expect(await described()).toBe(404);
      write('first version');
      await expect.poll(described, { timeout: 15_000 }).toBe('first version');
      write('second version');
      await expect.poll(described, { timeout: 15_000 }).toBe('second version');
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('cairn init', () => {
  it('writes a $schema that resolves from the new folder and prints the next three commands', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-init-'));
    try {
      const run = await cairn(['init', join(dir, 'project')], {});
      expect(run.code).toBe(0);
      const agentFile = join(dir, 'project', 'agents', 'assistant', 'agent.json');
      const agent = JSON.parse(readFileSync(agentFile, 'utf8')) as { $schema: string };
      const schemaPath = resolve(dirname(agentFile), agent.$schema);
      expect(existsSync(schemaPath)).toBe(true);
      // The copy is the schema the server validates with.
      expect(readFileSync(schemaPath, 'utf8')).toBe(
        readFileSync(new URL('../../schemas/agent.json', import.meta.url), 'utf8'),
      );
      const commands = run.stdout.split('\n').filter((l) => /^\s+cairn /.test(l));
      expect(commands.map((l) => l.trim().split(/\s+#/)[0]!.trim())).toEqual([
        'cairn agents validate',
        'cairn serve',
        'cairn chat assistant',
      ]);
      const valid = await cairn(['agents', 'validate'], { CAIRN_HOME: join(dir, 'project') });
      expect(valid.code).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('CLI errors that say what to fix', () => {
  it('every client command names the URL it tried when nothing answers', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-unreachable-'));
    const file = join(dir, 'session.ndjson');
    writeFileSync(file, '{}\n');
    try {
      const commands: [string[], string, string?][] = [
        [['sessions'], '/sessions'],
        // chat asks for the agent first, before it prints anything.
        [['chat', 'assistant'], '/agents/assistant', 'hi\n'],
        [['compact', 'sess_x'], '/sessions/sess_x/compact'],
        [['sessions', 'export', 'sess_x'], '/sessions/sess_x/export'],
        [['sessions', 'import', file], '/sessions/import'],
      ];
      for (const [args, path, stdin] of commands) {
        const run = await cairn([...args, '--url', '127.0.0.1:1'], {}, stdin);
        expect(run.code, args.join(' ')).toBe(1);
        expect(run.stderr, args.join(' ')).toContain(`http://127.0.0.1:1${path}`);
        expect(run.stderr.trim().split('\n')).toHaveLength(1);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('explains a URL that is not http(s)', async () => {
    const run = await cairn(['sessions', '--url', 'ftp://example.org'], {});
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('not an http(s) URL');
  });

  it('refuses --dry-run with --undo before sending anything', async () => {
    // No server at this URL: the refusal must come first, so nothing is tried.
    const run = await cairn(['compact', 'sess_abc', '--dry-run', '--undo'], {
      CAIRN_URL: 'http://127.0.0.1:1',
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('--undo cannot be combined with --dry-run');
  });

  it('serve on a port in use: one line naming the port and CAIRN_PORT, exit 1, never "ready"', async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const address = blocker.address();
    const port = typeof address === 'object' && address ? address.port : 0;
    const home = makeHome({}, null);
    try {
      const run = await cairn(['serve', '--no-daemons'], {
        CAIRN_HOME: home,
        CAIRN_PORT: String(port),
        CAIRN_LOG_LEVEL: 'info',
      });
      expect(run.code).toBe(1);
      expect(run.stdout).not.toContain('ready');
      const lines = run.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`port ${port}`);
      expect(lines[0]).toContain('CAIRN_PORT');
      expect(lines[0]).not.toMatch(/\n\s+at /);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('serve on a database it cannot open: one line naming the file and CAIRN_DB, exit 1', async () => {
    const home = makeHome({}, null);
    try {
      writeFileSync(join(home, 'garbage.db'), 'this is not SQLite '.repeat(400));
      mkdirSync(join(home, 'folder.db'));
      for (const file of ['garbage.db', 'folder.db']) {
        const path = join(home, file);
        const run = await cairn(['serve', '--no-daemons'], {
          CAIRN_HOME: home,
          CAIRN_PORT: '0',
          CAIRN_DB: path,
          CAIRN_LOG_LEVEL: 'info',
        });
        expect(run.code, file).toBe(1);
        expect(run.stdout, file).not.toContain('ready');
        const lines = run.stderr.trim().split('\n');
        expect(lines, file).toHaveLength(1);
        expect(lines[0]).toContain(`cannot open the database ${path}`);
        expect(lines[0]).toContain('CAIRN_DB');
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('agents validate fails an agent whose tool module does not exist, as start-up does', async () => {
    const home = makeHome(
      {
        agents: {
          assistant: TEST_AGENT,
          tooly: { ...TEST_AGENT, name: 'tooly', tools: ['./tools/missing.js'] },
          unknown: { ...TEST_AGENT, name: 'unknown', tools: ['no_such_builtin'] },
        },
      },
      null,
    );
    try {
      const run = await cairn(['agents', 'validate'], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(run.stdout).toMatch(/ok\s+assistant/);
      expect(run.stdout).not.toMatch(/ok\s+tooly/);
      expect(run.stdout).not.toMatch(/ok\s+unknown/);
      expect(run.stderr).toContain('./tools/missing.js does not exist');
      expect(run.stderr).toContain('unknown tool "no_such_builtin"');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('agents validate passes exactly the agents cairn serve can run, and names the same problems', async () => {
    const home = makeHome(
      {
        agents: {
          assistant: TEST_AGENT,
          noexport: { ...TEST_AGENT, name: 'noexport', tools: ['./tools/empty.js'] },
          broken: { ...TEST_AGENT, name: 'broken', tools: ['./tools/syntax.js'] },
          missing: { ...TEST_AGENT, name: 'missing', tools: ['./tools/missing.js'] },
        },
        files: {
          'agents/noexport/tools/empty.js': 'export const nothing = 1;\n',
          'agents/broken/tools/syntax.js': 'export default {\n',
        },
      },
      null,
    );
    try {
      const run = await cairn(['agents', 'validate'], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      const validated = [...run.stdout.matchAll(/^ok\s+(\S+)/gm)].map((m) => m[1]);
      expect(validated).toEqual(['assistant']);
      const server = await spawnServer({ home });
      try {
        for (const agent of ['assistant', 'noexport', 'broken', 'missing']) {
          const res = await fetch(`${server.url}/agents/${agent}/chat`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ message: 'hi' }),
          });
          if (validated.includes(agent)) {
            expect(res.status, agent).toBe(200);
            continue;
          }
          const { error } = (await res.json()) as { error: { code: string; message: string } };
          expect(res.status, agent).toBe(400);
          // The turn fails with the problem validate printed for this agent's file.
          const printed = run.stderr
            .split('\n')
            .find((line) => line.includes(`/agents/${agent}/agent.json`));
          expect(printed, agent).toContain(error.message);
          expect(error.message).toContain(`Agent "${agent}"`);
        }
      } finally {
        await server.stop('SIGTERM');
      }
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('agents validate accepts a working tool module', async () => {
    const home = makeHome(
      { agents: { tooly: { ...TEST_AGENT, name: 'tooly', tools: ['./tools/echo.js'] } } },
      null,
    );
    mkdirSync(join(home, 'agents/tooly/tools'), { recursive: true });
    writeFileSync(
      join(home, 'agents/tooly/tools/echo.js'),
      `export default { name: 'echo', description: 'Echo.', parameters: { type: 'object' }, async run(a) { return JSON.stringify(a); } };\n`,
    );
    try {
      const run = await cairn(['agents', 'validate'], { CAIRN_HOME: home });
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toMatch(/ok\s+tooly/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
