/**
 * `cairn keys create|list|revoke` with the compiled bin in a child process
 * against a real server: the secret is printed once and works, the list never
 * shows it, a revoked key is refused at once, and without the admin key the
 * CLI is refused.
 */
import { execFile } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { CLI_PATH } from '../process/spawn-server.js';

const ADMIN_KEY = 'cli-admin-key';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cairn(args: string[], env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

let harness: TestApp;
let env: Record<string, string>;

beforeAll(async () => {
  harness = await startTestApp({ server: { apiKey: ADMIN_KEY }, fake: null });
  const address = await harness.app.server.listen({ port: 0, host: '127.0.0.1' });
  env = { CAIRN_URL: address, CAIRN_API_KEY: ADMIN_KEY, CAIRN_HOME: harness.home };
});

afterAll(async () => {
  await harness.close();
});

describe('cairn keys', () => {
  it('creates a key, lists it without its secret, and revokes it at once', async () => {
    const created = await cairn(
      [
        'keys',
        'create',
        'chat ui',
        '--agents',
        'assistant',
        '--rpm',
        '30',
        '--tokens-per-day',
        '5000',
      ],
      env,
    );
    expect(created.code, created.stderr).toBe(0);
    const secret = /secret \(shown once, store it now\): (cairn_sk_\S+)/.exec(created.stdout)?.[1];
    const id = /created (key_\S+)/.exec(created.stdout)?.[1];
    expect(secret).toBeDefined();
    expect(id).toBeDefined();
    const asKey = () =>
      harness.app.server.inject({
        method: 'GET',
        url: '/agents',
        headers: { authorization: `Bearer ${secret!}` },
      });
    expect((await asKey()).statusCode).toBe(200);

    const listed = await cairn(['keys', 'list'], env);
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain(id!);
    expect(listed.stdout).toContain('30/min, 5000 tokens/day');
    expect(listed.stdout).toContain('cost 0, 0 tokens today');
    expect(listed.stdout).not.toContain(secret!);

    const revoked = await cairn(['keys', 'revoke', id!], env);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toContain(`revoked ${id!}`);
    expect((await asKey()).statusCode).toBe(401);
  });

  it('refuses a bad limit before calling the server, and a revoke of an unknown key', async () => {
    const bad = await cairn(['keys', 'create', 'x', '--rpm', 'lots'], env);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--rpm must be a positive whole number');
    expect(await harness.app.store.listKeys()).toHaveLength(1);
    const unknown = await cairn(['keys', 'revoke', 'key_nope'], env);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('KEY_NOT_FOUND');
  });

  it('is refused without the admin key', async () => {
    const run = await cairn(['keys', 'list'], { ...env, CAIRN_API_KEY: 'wrong' });
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('UNAUTHORIZED');
  });
});
