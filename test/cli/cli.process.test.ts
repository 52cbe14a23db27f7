/**
 * The `cairn` command line, run as users run it: the compiled bin
 * (dist/cli/main.js, built by the global setup) in a child process.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase } from '../helpers/postgres.js';
import { makeHome } from '../helpers/test-app.js';
import { POSTGRES_MIGRATIONS } from '../../src/store/migrations/index.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `cairn …` with only the variables we pass (no inherited CAIRN_* or keys). */
function cairn(args: string[], env: Record<string, string>, cwd?: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, ...(cwd ? { cwd } : {}), timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('cairn init and agents validate', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'cairn-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('init creates cairn.json and a demo agent that validates; a second init changes nothing', async () => {
    const first = await cairn(['init', dir], {});
    expect(first.code).toBe(0);
    expect(first.stdout).toContain('created');
    expect(existsSync(join(dir, 'cairn.json'))).toBe(true);
    const agent = JSON.parse(readFileSync(join(dir, 'agents/assistant/agent.json'), 'utf8'));
    expect(agent.name).toBe('assistant');

    const again = await cairn(['init', dir], {});
    expect(again.stdout).toContain('nothing to do');

    const valid = await cairn(['agents', 'validate'], { CAIRN_HOME: dir });
    expect(valid.code).toBe(0);
    expect(valid.stdout).toMatch(/ok\s+assistant/);
  });

  it('agents validate exits 1 and names the file, pointer and rule of a bad agent', async () => {
    const bad = join(dir, 'agents', 'broken');
    rmSync(bad, { recursive: true, force: true });
    await cairn(['init', dir], {});
    mkdirSync(bad, { recursive: true });
    writeFileSync(
      join(bad, 'agent.json'),
      JSON.stringify({ name: 'broken', system: 'x', maxIterations: 0 }),
    );
    const run = await cairn(['agents', 'validate'], { CAIRN_HOME: dir });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(join('broken', 'agent.json'));
    expect(run.stderr).toContain('/maxIterations');
    expect(run.stderr).toContain('minimum');
    // The good agent is still reported as loadable.
    expect(run.stdout).toMatch(/ok\s+assistant/);
    rmSync(bad, { recursive: true, force: true });
  });

  it('migrate reports what it applied, then that the database is up to date', async () => {
    const db = join(dir, 'data', 'migrate.db');
    const first = await cairn(['migrate'], { CAIRN_HOME: dir, CAIRN_DB: db });
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/applied migrations: 1, 2/);
    const second = await cairn(['migrate'], { CAIRN_HOME: dir, CAIRN_DB: db });
    expect(second.stdout).toContain('up to date');
  });

  it('migrate applies the Postgres migrations of DATABASE_URL, never printing the password', async () => {
    const database = await createTestDatabase();
    try {
      const url = new URL(database.url);
      url.password = 'sentinel-pw';
      const env = { CAIRN_HOME: dir, DATABASE_URL: url.toString() };
      const first = await cairn(['migrate'], env);
      expect(first.stderr).toBe('');
      expect(first.code).toBe(0);
      expect(first.stdout).toMatch(
        new RegExp(
          `applied migrations: ${POSTGRES_MIGRATIONS.map((m) => m.version).join(', ')} \\(Postgres database ${database.name} on `,
        ),
      );
      const second = await cairn(['migrate'], env);
      expect(second.stdout).toContain('up to date');
      expect(first.stdout + second.stdout).not.toContain('sentinel-pw');
    } finally {
      await database.drop();
    }
  });

  it('migrate against an unreachable Postgres fails with DATABASE_UNAVAILABLE', async () => {
    const run = await cairn(['migrate'], {
      CAIRN_HOME: dir,
      DATABASE_URL: 'postgres://postgres:sentinel-pw@127.0.0.1:1/cairn',
    });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^error DATABASE_UNAVAILABLE: /);
    expect(run.stderr).not.toContain('sentinel-pw');
  });
});

describe('cairn sessions and cairn compact against a running server', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({}, fake.baseURL);
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  async function chat(message: string, sessionId?: string): Promise<string> {
    const res = await fetch(`${server.url}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message, ...(sessionId ? { sessionId } : {}) }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { sessionId: string }).sessionId;
  }

  it('lists sessions, previews, compacts and undoes a compaction', async () => {
    const id = await chat('first message about the Lisbon offsite');
    for (let i = 0; i < 3; i++) await chat(`follow-up ${i}`, id);
    const env = { CAIRN_URL: server.url };

    const sessions = await cairn(['sessions'], env);
    expect(sessions.code).toBe(0);
    expect(sessions.stdout).toContain(id);

    const dry = await cairn(['compact', id, '--dry-run', '--json'], env);
    expect(dry.code).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ sessionId: id, dryRun: true });

    fake.script({ content: 'Summary: offsite in Lisbon.' });
    const real = await cairn(['compact', id, '--json'], env);
    expect(real.code).toBe(0);
    const report = JSON.parse(real.stdout);
    expect(report).toMatchObject({ sessionId: id, alreadyUpToDate: false });
    expect(report.compactedCount).toBeGreaterThan(0);

    const undo = await cairn(['compact', id, '--undo', '--json'], env);
    expect(undo.code).toBe(0);
    expect(JSON.parse(undo.stdout)).toMatchObject({ sessionId: id, restoredSize: 0 });

    const again = await cairn(['compact', id, '--undo'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('COMPACTION_CONFLICT');
  });

  it('reports an unknown session with its error code and exits 1', async () => {
    const run = await cairn(['compact', 'sess_doesnotexist'], { CAIRN_URL: server.url });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('SESSION_NOT_FOUND');
  });

  it('says clearly when no server is listening', async () => {
    const run = await cairn(['sessions'], { CAIRN_URL: 'http://127.0.0.1:1' });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('could not reach the Cairn server');
  });

  it('chat streams a reply from the agent, reading lines from stdin', async () => {
    fake.script({ content: 'Streamed hello from the fake.' });
    const run = await new Promise<Run>((resolve) => {
      const child = execFile(
        process.execPath,
        [CLI_PATH, 'chat', 'assistant'],
        { env: { PATH: process.env.PATH ?? '', CAIRN_URL: server.url }, timeout: 20_000 },
        (error, stdout, stderr) => resolve({ code: error ? 1 : 0, stdout, stderr }),
      );
      child.stdin?.end('hello there\n\n');
    });
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('Streamed hello from the fake.');
    expect(run.stdout).toMatch(/session: sess_/);
  });
});

describe('cairn serve', () => {
  it('refuses to listen beyond loopback without an API key, and says how to fix it', async () => {
    const home = makeHome({}, null);
    try {
      const run = await cairn(['serve'], {
        CAIRN_HOME: home,
        CAIRN_HOST: '0.0.0.0',
        CAIRN_PORT: '0',
      });
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('Refusing to listen on 0.0.0.0 without an API key');
      expect(run.stderr).toContain('CAIRN_API_KEY');
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('--no-daemons runs no scheduled agent; without it the daemon ticks', async () => {
    const fake = await startFakeLlmServer();
    const ticker = {
      name: 'ticker',
      system: 'You are a daemon.',
      tools: [],
      daemon: { every: '1s', prompt: 'Report.' },
    };
    const home = makeHome({ agents: { ticker } }, fake.baseURL);
    const daemonSessions = async (url: string): Promise<number> => {
      const res = await fetch(`${url}/sessions?agentName=ticker`);
      return ((await res.json()) as { sessions: unknown[] }).sessions.length;
    };
    try {
      // spawnServer passes --no-daemons.
      const quiet = await spawnServer({ home });
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      expect(await daemonSessions(quiet.url)).toBe(0);
      expect(fake.requests).toHaveLength(0);
      await quiet.stop('SIGTERM');

      const port = String(quiet.port);
      const child = execFile(process.execPath, [CLI_PATH, 'serve'], {
        env: {
          PATH: process.env.PATH ?? '',
          CAIRN_HOME: home,
          CAIRN_PORT: port,
          CAIRN_LOG_LEVEL: 'warn',
        },
      });
      try {
        const url = `http://127.0.0.1:${port}`;
        await expect
          .poll(async () => daemonSessions(url).catch(() => 0), { timeout: 15_000, interval: 250 })
          .toBeGreaterThan(0);
      } finally {
        child.kill('SIGTERM');
        await new Promise((resolve) => child.once('exit', resolve));
      }
    } finally {
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    }
  });
});
