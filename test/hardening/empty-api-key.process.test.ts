/**
 * An empty (or blank) API key is no key. The real CLI still
 * refuses a public bind when cairn.json says `"apiKey": ""` or the
 * environment says `CAIRN_API_KEY=`.
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH } from '../process/spawn-server.js';

interface Run {
  code: number;
  stderr: string;
}

function serve(env: Record<string, string>): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, 'serve', '--no-daemons'],
      { env: { PATH: process.env.PATH ?? '', ...env }, timeout: 20_000 },
      (error, _stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stderr });
      },
    );
  });
}

describe('an empty API key counts as none', () => {
  const homes: string[] = [];
  afterEach(() => {
    for (const home of homes.splice(0)) rmSync(home, { recursive: true, force: true });
  });

  it.each([
    ['"apiKey": "" in cairn.json', { apiKey: '' }, {}],
    ['"apiKey": "   " in cairn.json', { apiKey: '   ' }, {}],
    ['CAIRN_API_KEY= in the environment', {}, { CAIRN_API_KEY: '' }],
  ])('refuses a public bind with %s', async (_label, server, env) => {
    const home = makeHome({ server }, null);
    homes.push(home);
    expect(loadSettings({ home, env }).server.apiKey).toBeNull();
    const run = await serve({ CAIRN_HOME: home, CAIRN_HOST: '0.0.0.0', CAIRN_PORT: '0', ...env });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('Refusing to listen on 0.0.0.0 without an API key');
    expect(run.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('an empty key in the environment does not hide the key in cairn.json', () => {
    const home = makeHome({ server: { apiKey: 'from-file' } }, null);
    homes.push(home);
    expect(loadSettings({ home, env: { CAIRN_API_KEY: '' } }).server.apiKey).toBe('from-file');
  });
});
