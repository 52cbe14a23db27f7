/**
 * Which server a client command talks to, and what it says about it:
 * `cairn serve` records its address in its home, and `chat`, `sessions` and
 * `compact` started in that home use it when neither `--url` nor `CAIRN_URL`
 * names one (a record whose process is gone is ignored); `serve --port /
 * --host` override the settings, and bad values are one line; `cairn chat`
 * names the server in its banner and answers `/help`, `/session` and
 * `/compact` itself, never sending them to the model; `cairn compact` prints a
 * short summary (`--json` the whole result).
 *
 * The trap is set up as found: the home's cairn.json names the port
 * of another server (a "clone" on the default address), and the home's own
 * server runs on a port given by CAIRN_PORT.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, freePort, spawnServer, type ServerProcess } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cairn …` with only the variables passed (no inherited CAIRN_*), in `cwd`; `stdin` is written and closed. */
function cairn(
  args: string[],
  { env = {}, cwd, stdin = '' }: { env?: Record<string, string>; cwd?: string; stdin?: string },
): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI_PATH, ...args],
      {
        env: { PATH: process.env.PATH ?? '', ...env },
        ...(cwd ? { cwd } : {}),
        timeout: 20_000,
      },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
    child.stdin?.end(stdin);
  });
}

const ADDRESS_FILE = '.cairn-server.json';

async function sessionIds(url: string): Promise<string[]> {
  const res = await fetch(`${url}/sessions`);
  const body = (await res.json()) as { sessions: { id: string }[] };
  return body.sessions.map((s) => s.id);
}

describe('a client started in the home of a running server', () => {
  let fake: FakeLlmServer;
  let cloneHome: string;
  let clone: ServerProcess;
  let home: string;
  let server: ServerProcess;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'A summary.' } : { content: 'ok' },
    );
    cloneHome = makeHome({}, fake.baseURL);
    clone = await spawnServer({ home: cloneHome });
    // This home's cairn.json names the clone's port; its own server gets another through CAIRN_PORT.
    home = makeHome({ server: { port: clone.port } }, fake.baseURL);
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await clone.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
    rmSync(cloneHome, { recursive: true, force: true });
  });

  it('chat reaches the server recorded in the home, and its banner shows that URL', async () => {
    const run = await cairn(['chat', 'assistant'], { cwd: home, stdin: 'hello\n' });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n')[0]).toContain(`chatting with assistant on ${server.url}`);
    const id = /session: (sess_\w+)/.exec(run.stdout)?.[1];
    expect(await sessionIds(server.url)).toContain(id);
    expect(await sessionIds(clone.url)).not.toContain(id);
  });

  it('the record is a small file naming the URL and the pid of the server', () => {
    const record = JSON.parse(readFileSync(join(home, ADDRESS_FILE), 'utf8')) as {
      url: string;
      pid: number;
    };
    expect(record).toMatchObject({ url: server.url, pid: server.child.pid });
  });

  it('CAIRN_HOME finds it as the working directory does', async () => {
    const res = await fetch(`${server.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ agentName: 'assistant' }),
    });
    const { session } = (await res.json()) as { session: { id: string } };
    const run = await cairn(['sessions'], { env: { CAIRN_HOME: home } });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(session.id);
  });

  it('--url wins over CAIRN_URL, which wins over the recorded address', async () => {
    const viaEnv = await cairn(['chat', 'assistant'], {
      cwd: home,
      env: { CAIRN_URL: clone.url },
      stdin: 'hi\n',
    });
    expect(viaEnv.stdout).toContain(`chatting with assistant on ${clone.url}`);
    const viaFlag = await cairn(['chat', 'assistant', '--url', server.url], {
      cwd: home,
      env: { CAIRN_URL: clone.url },
      stdin: 'hi\n',
    });
    expect(viaFlag.stdout).toContain(`chatting with assistant on ${server.url}`);
  });

  it('/help, /session and /compact are answered by the CLI, never sent to the model', async () => {
    fake.reset();
    fake.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'A summary.' } : { content: 'ok' },
    );
    const run = await cairn(['chat', 'assistant'], {
      cwd: home,
      stdin: '/help\n/session\n/compact\none\ntwo\nthree\n/session\n/compact\n/quit\n',
    });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    // /help lists every local command.
    for (const command of ['/help', '/session', '/compact', '/quit'])
      expect(run.stdout).toMatch(new RegExp(`^\\s*${command}\\b`, 'm'));
    expect(run.stdout).toContain('no session yet');
    expect(run.stdout).toContain('nothing to compact yet');
    const id = /session: (sess_\w+)/.exec(run.stdout)![1]!;
    expect(run.stdout).toMatch(new RegExp(`session ${id} on ${server.url}`));
    expect(run.stdout).toMatch(new RegExp(`compacted \\d+ messages? of ${id}`));

    // The model saw three messages and one summary request, nothing starting with a slash.
    const chats = fake.requests.filter((r) => !isSummaryRequest(r.body));
    expect(chats).toHaveLength(3);
    expect(fake.requests.filter((r) => isSummaryRequest(r.body))).toHaveLength(1);
    for (const request of fake.requests)
      expect(JSON.stringify(request.body.messages)).not.toMatch(/"\/(help|session|compact)/);
    const res = await fetch(`${server.url}/sessions/${id}/messages`);
    const { messages } = (await res.json()) as { messages: { role: string; content: string }[] };
    expect(messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
      'one',
      'two',
      'three',
    ]);
  });

  it('compact prints a short summary; --json prints the whole result', async () => {
    let sessionId: string | undefined;
    for (const message of ['one', 'two', 'three', 'four']) {
      const res = await fetch(`${server.url}/agents/assistant/chat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message, ...(sessionId ? { sessionId } : {}) }),
      });
      sessionId = ((await res.json()) as { sessionId: string }).sessionId;
    }
    const id = sessionId!;
    const dry = await cairn(['compact', id, '--dry-run'], { cwd: home });
    expect(dry.code).toBe(0);
    expect(dry.stdout.trim().split('\n')).toHaveLength(1);
    expect(dry.stdout).toMatch(new RegExp(`dry run: would compact \\d+ messages? of ${id}`));

    const real = await cairn(['compact', id], { cwd: home });
    expect(real.code).toBe(0);
    expect(real.stdout.trim().split('\n')).toHaveLength(1);
    expect(real.stdout).toMatch(new RegExp(`^compacted \\d+ messages? of ${id}`));
    expect(real.stdout).not.toContain('{');

    const undo = await cairn(['compact', id, '--undo', '--json'], { cwd: home });
    expect(undo.code).toBe(0);
    expect(JSON.parse(undo.stdout)).toMatchObject({ sessionId: id, restoredSize: 0 });

    const again = await cairn(['compact', id, '--json'], { cwd: home });
    expect(JSON.parse(again.stdout)).toMatchObject({ sessionId: id, alreadyUpToDate: false });
    const undoText = await cairn(['compact', id, '--undo'], { cwd: home });
    expect(undoText.stdout.trim()).toMatch(new RegExp(`^undid the latest compaction of ${id}`));
  });
});

describe('a record left by a server that is gone', () => {
  it('is ignored after a crash, and removed by a clean stop', async () => {
    const fake = await startFakeLlmServer();
    const cloneHome = makeHome({}, fake.baseURL);
    const clone = await spawnServer({ home: cloneHome });
    const home = makeHome({ server: { port: clone.port } }, fake.baseURL);
    try {
      const crashed = await spawnServer({ home });
      await crashed.stop('SIGKILL');
      expect(existsSync(join(home, ADDRESS_FILE))).toBe(true);
      // The crashed server's pid is dead: the client falls back to cairn.json (the clone).
      const afterCrash = await cairn(['chat', 'assistant'], { cwd: home, stdin: 'hi\n' });
      expect(afterCrash.stdout).toContain(`chatting with assistant on ${clone.url}`);

      const stopped = await spawnServer({ home });
      expect(JSON.parse(readFileSync(join(home, ADDRESS_FILE), 'utf8'))).toMatchObject({
        url: stopped.url,
      });
      await stopped.stop('SIGTERM');
      expect(existsSync(join(home, ADDRESS_FILE))).toBe(false);
    } finally {
      await clone.stop('SIGTERM');
      await fake.close();
      rmSync(home, { recursive: true, force: true });
      rmSync(cloneHome, { recursive: true, force: true });
    }
  });
});

describe('cairn serve --port and --host', () => {
  it('--port and --host override CAIRN_PORT, CAIRN_HOST and cairn.json', async () => {
    const home = makeHome({}, null);
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [CLI_PATH, 'serve', '--no-daemons', '--port', String(port), '--host', '127.0.0.1'],
      {
        env: {
          PATH: process.env.PATH ?? '',
          CAIRN_HOME: home,
          CAIRN_PORT: '1',
          CAIRN_HOST: 'localhost',
          CAIRN_LOG_LEVEL: 'warn',
        },
        stdio: 'ignore',
      },
    );
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      const url = `http://127.0.0.1:${port}`;
      await expect
        .poll(async () => (await fetch(`${url}/health`).catch(() => undefined))?.status, {
          timeout: 15_000,
        })
        .toBe(200);
      expect(JSON.parse(readFileSync(join(home, ADDRESS_FILE), 'utf8'))).toMatchObject({ url });
    } finally {
      child.kill('SIGTERM');
      await exited;
      rmSync(home, { recursive: true, force: true });
    }
  });

  it.each([
    [['--port', 'abc'], /--port must be an integer 0–65535, got "abc"/],
    [['--port', '70000'], /--port must be an integer 0–65535, got "70000"/],
    [['--port', '80.5'], /--port must be an integer 0–65535, got "80.5"/],
    [['--host', 'http://127.0.0.1'], /--host takes a host name or an IP address/],
    [['--host', ''], /--host takes a host name or an IP address/],
    [['--host', '127.0.0.1:5050'], /--host takes a host name or an IP address/],
  ])('refuses %j with one line and exit 1', async (flags, message) => {
    const home = makeHome({}, null);
    try {
      const run = await cairn(['serve', '--no-daemons', ...flags], {
        env: { CAIRN_HOME: home, CAIRN_LOG_LEVEL: 'info' },
      });
      expect(run.code).toBe(1);
      expect(run.stdout).not.toContain('ready');
      const lines = run.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(message);
      expect(existsSync(join(home, ADDRESS_FILE))).toBe(false);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('--host beyond loopback without an API key is refused as CAIRN_HOST is', async () => {
    const home = makeHome({}, null);
    try {
      const run = await cairn(['serve', '--host', '0.0.0.0', '--port', '0'], {
        env: { CAIRN_HOME: home },
      });
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('Refusing to listen on 0.0.0.0 without an API key');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('a port in use given with --port says to choose another with --port', async () => {
    const fake = await startFakeLlmServer();
    const home = makeHome({}, null);
    const busy = makeHome({}, fake.baseURL);
    const taken = await spawnServer({ home: busy });
    try {
      const run = await cairn(['serve', '--no-daemons', '--port', String(taken.port)], {
        env: { CAIRN_HOME: home },
      });
      expect(run.code).toBe(1);
      const lines = run.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain(`port ${taken.port}`);
      expect(lines[0]).toContain('--port');
      // The failed server records nothing, and leaves the running one's record alone.
      expect(existsSync(join(home, ADDRESS_FILE))).toBe(false);
    } finally {
      await taken.stop('SIGTERM');
      await fake.close();
      rmSync(home, { recursive: true, force: true });
      rmSync(busy, { recursive: true, force: true });
    }
  });
});

describe('a client whose server is unreachable', () => {
  it('names the URL and where it came from, in one line', async () => {
    const home = makeHome({ server: { port: 1 } }, null);
    try {
      const run = await cairn(['chat', 'assistant'], { cwd: home, stdin: 'hi\n' });
      expect(run.code).toBe(1);
      const lines = run.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain('http://127.0.0.1:1/agents/assistant');
      expect(lines[0]).toContain('cairn.json');
      expect(run.stderr).not.toMatch(/\n\s+at /);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
