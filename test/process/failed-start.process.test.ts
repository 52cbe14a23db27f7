/**
 * A start that fails leaves nothing behind: not the database file it created
 * (migrated, holding nothing), nor its lock file or data folder; a database
 * that was there before is kept as it was. The built CLI on a real port that
 * another socket holds.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH } from './spawn-server.js';

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A port held by a plain socket for the test's duration. */
async function heldPort(): Promise<number> {
  const holder: Server = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => holder.close(() => resolve())));
  const address = holder.address();
  return typeof address === 'object' && address !== null ? address.port : 0;
}

/** `cairn serve --no-daemons` on `home` and `port`; resolves with its exit code and output. */
function serve(home: string, port: number): Promise<{ code: number | null; output: string }> {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env))
    if (!key.startsWith('CAIRN_') && !key.startsWith('OPENAI_') && key !== 'DATABASE_URL')
      env[key] = value;
  const child = spawn(process.execPath, [CLI_PATH, 'serve', '--no-daemons'], {
    env: { ...env, CAIRN_HOME: home, CAIRN_PORT: String(port), CAIRN_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, output })));
}

function newHome(): string {
  const home = makeHome({}, null);
  cleanups.push(() => rmSync(home, { recursive: true, force: true }));
  return home;
}

describe('a failed start', () => {
  it('removes the database, lock file and data folder it created', async () => {
    const home = newHome();
    const run = await serve(home, await heldPort());
    expect(run.output).toContain('EADDRINUSE');
    expect(run.code).toBe(1);
    expect(existsSync(join(home, 'data')), run.output).toBe(false);
  });

  it('never removes a database that was there before, nor what it holds', async () => {
    const home = newHome();
    const dbPath = join(home, 'data', 'cairn.db');
    const store = new SqliteStore(dbPath);
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'You help.',
    });
    await store.close();
    const before = readFileSync(dbPath);

    const run = await serve(home, await heldPort());
    expect(run.code).toBe(1);
    expect(readFileSync(dbPath).equals(before), run.output).toBe(true);
    expect(readdirSync(join(home, 'data')).filter((f) => f.endsWith('.lock'))).toEqual([]);
    const reopened = new SqliteStore(dbPath);
    cleanups.push(() => reopened.close());
    expect((await reopened.findSession(session.id))?.id).toBe(session.id);
  });
});
