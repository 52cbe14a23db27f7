/**
 * `cairn doctor`, the compiled bin against the fake OpenAI server, up, down,
 * hanging and refusing the key: one ✓ or ✗ line per check (settings, the
 * database, each model role's endpoints with a tiny real request, each agent),
 * exit code 1 when any failed, never a stack trace.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { CLI_PATH, freePort, spawnServer } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

function doctor(args: string[], env: Record<string, string>): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, 'doctor', ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 30_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr, ms: Date.now() - started });
      },
    );
  });
}

/** The line of the check named `name` (`model main`, `agent assistant`, …). */
function line(run: Run, name: string): string {
  const found = `${run.stdout}${run.stderr}`
    .split('\n')
    .find((l) => new RegExp(`^[✓✗] ${name}\\b`).test(l));
  if (found === undefined) throw new Error(`no "${name}" line in:\n${run.stdout}${run.stderr}`);
  return found;
}

const noStackTrace = (run: Run): void => {
  expect(`${run.stdout}${run.stderr}`).not.toMatch(/\n\s+at /);
};

describe('cairn doctor with the model up', () => {
  let fake: FakeLlmServer;
  let home: string;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({}, fake.baseURL);
  });
  afterAll(async () => {
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('passes every check with one tiny request per endpoint, and exits 0', async () => {
    fake.reset();
    fake.script({ content: 'ok' });
    const run = await doctor([], { CAIRN_HOME: home });
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(line(run, 'settings')).toMatch(/^✓/);
    expect(line(run, 'database')).toMatch(/^✓/);
    expect(line(run, 'model main')).toMatch(/^✓ model main\s+test-model \(openai\) at /);
    expect(line(run, 'model main')).toContain(fake.baseURL);
    expect(line(run, 'agent assistant')).toMatch(/^✓/);
    expect(run.stdout).not.toContain('✗');
    // compact and title fall back to main: one endpoint, one request.
    const chats = fake.requests.filter((r) => r.path === '/v1/chat/completions');
    expect(chats).toHaveLength(1);
    expect(chats[0]!.body.messages).toHaveLength(1);
    expect(chats[0]!.body.tools).toBeUndefined();
  });

  it('checks a compact role of its own separately, and fails when only it is down', async () => {
    fake.reset();
    const downPort = await freePort();
    const split = makeHome(
      { compactModel: { baseURL: `http://127.0.0.1:${downPort}/v1`, model: 'summariser' } },
      fake.baseURL,
    );
    try {
      const run = await doctor([], { CAIRN_HOME: split });
      expect(run.code).toBe(1);
      expect(line(run, 'model main')).toMatch(/^✓/);
      expect(line(run, 'model compact')).toMatch(
        new RegExp(
          `^✗ model compact\\s+summariser \\(openai\\) at http://127.0.0.1:${downPort}/v1`,
        ),
      );
      expect(line(run, 'model compact')).toContain('Could not reach the model');
      noStackTrace(run);
    } finally {
      rmSync(split, { recursive: true, force: true });
    }
  });
});

describe('cairn doctor with the model down', () => {
  it('names the endpoint that did not answer, still checks the rest, and exits 1', async () => {
    const fake = await startFakeLlmServer();
    const home = makeHome(
      {
        agents: {
          assistant: TEST_AGENT,
          broken: { ...TEST_AGENT, name: 'broken', maxIterations: 0 },
        },
      },
      fake.baseURL,
    );
    await fake.close();
    try {
      const run = await doctor([], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(line(run, 'model main')).toMatch(/^✗ model main/);
      expect(line(run, 'model main')).toContain(fake.baseURL);
      expect(line(run, 'model main')).toContain('Could not reach the model');
      expect(line(run, 'database')).toMatch(/^✓/);
      expect(line(run, 'agent assistant')).toMatch(/^✓/);
      expect(line(run, 'agent broken')).toMatch(/^✗ agent broken.*\/maxIterations/);
      expect(run.stdout + run.stderr).toMatch(/2 checks failed/);
      noStackTrace(run);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('gives up on a model that hangs after --timeout', async () => {
    const fake = await startFakeLlmServer();
    fake.script({ hang: true });
    const home = makeHome({}, fake.baseURL);
    try {
      const run = await doctor(['--timeout', '500'], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(line(run, 'model main')).toMatch(/^✗ .*did not answer within 500 ms/);
      expect(run.ms).toBeLessThan(10_000);
      noStackTrace(run);
    } finally {
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('reports a refused key with the provider status and what to check', async () => {
    const fake = await startFakeLlmServer();
    fake.script({ status: 401 });
    const home = makeHome({}, fake.baseURL);
    try {
      const run = await doctor([], { CAIRN_HOME: home, OPENAI_API_KEY: 'sk-sentinel-key' });
      expect(run.code).toBe(1);
      expect(line(run, 'model main')).toMatch(/^✗ .*HTTP 401.*API key/);
      expect(run.stdout + run.stderr).not.toContain('sk-sentinel-key');
    } finally {
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('checks each fallback endpoint of a role', async () => {
    const fake = await startFakeLlmServer();
    const downPort = await freePort();
    const home = makeHome(
      {
        mainModel: {
          fallbacks: [{ baseURL: `http://127.0.0.1:${downPort}/v1`, model: 'backup' }],
        },
      },
      fake.baseURL,
    );
    try {
      const run = await doctor([], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(line(run, 'model main')).toMatch(/^✓/);
      expect(line(run, 'model main fallback 1')).toMatch(/^✗ model main fallback 1\s+backup/);
    } finally {
      await fake.close();
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('cairn doctor on other setups', () => {
  it('passes with the offline model and no database yet', async () => {
    const home = makeHome({}, null);
    try {
      const run = await doctor([], { CAIRN_HOME: home });
      expect(run.code).toBe(0);
      expect(line(run, 'model main')).toMatch(/^✓ model main\s+offline/);
      expect(line(run, 'database')).toMatch(/^✓ database .*not created yet/);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('fails a database file it cannot open, naming it', async () => {
    const home = makeHome({}, null);
    const garbage = join(home, 'garbage.db');
    writeFileSync(garbage, 'this is not SQLite '.repeat(400));
    try {
      const run = await doctor([], { CAIRN_HOME: home, CAIRN_DB: garbage });
      expect(run.code).toBe(1);
      expect(line(run, 'database')).toMatch(/^✗ database/);
      expect(line(run, 'database')).toContain(garbage);
      expect(line(run, 'database')).toContain('SQLITE_NOTADB');
      noStackTrace(run);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('opens the database of a running server, which keeps running', async () => {
    const home = makeHome({}, null);
    const server = await spawnServer({ home });
    try {
      const run = await doctor([], { CAIRN_HOME: home, CAIRN_DB: join(home, 'data', 'cairn.db') });
      expect(run.code).toBe(0);
      expect(line(run, 'database')).toMatch(/^✓ database .*up to date/);
      expect(line(run, 'server')).toMatch(new RegExp(`^✓ server\\s+${server.url}`));
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
    } finally {
      await server.stop('SIGTERM');
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('fails invalid settings in one line and checks nothing else', async () => {
    const home = makeHome({}, null);
    writeFileSync(join(home, 'cairn.json'), JSON.stringify({ server: { prot: 1 } }));
    try {
      const run = await doctor([], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(line(run, 'settings')).toMatch(/^✗ settings.*unknown property "prot"/);
      noStackTrace(run);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });

  it.each([['abc'], ['0'], ['-5']])('refuses --timeout %s with one line', async (value) => {
    const home = makeHome({}, null);
    mkdirSync(join(home, 'data'), { recursive: true });
    try {
      const run = await doctor(['--timeout', value], { CAIRN_HOME: home });
      expect(run.code).toBe(1);
      expect(run.stderr.trim().split('\n')).toHaveLength(1);
      expect(run.stderr).toContain(`--timeout must be a whole number of milliseconds`);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});
