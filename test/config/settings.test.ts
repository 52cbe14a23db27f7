/**
 * Settings: cairn.json + environment → one frozen Settings. The
 * `compact` role falls back to `main` field by field; with no model anywhere
 * both roles use the built-in offline model; secrets come from the
 * environment only and never appear in what is logged.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import {
  DEFAULT_BODY_LIMIT_BYTES,
  DEFAULT_IMPORT_DAY_BYTES,
  DEFAULT_IMPORT_MAX_BYTES,
  DEFAULT_CONTEXT_WINDOW_TOKENS,
  DEFAULT_OPENAI_BASE_URL,
  DEFAULT_OPENAI_MODEL,
  describeModelRole,
  loadSettings,
} from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';

const homes: string[] = [];

function home(cairnJson?: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-settings-'));
  homes.push(dir);
  if (cairnJson !== undefined) {
    writeFileSync(
      join(dir, 'cairn.json'),
      typeof cairnJson === 'string' ? cairnJson : JSON.stringify(cairnJson),
    );
  }
  return dir;
}

afterEach(() => {
  for (const dir of homes.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function loadError(dir: string, env: Record<string, string> = {}): CairnError {
  try {
    loadSettings({ home: dir, env });
  } catch (err) {
    expect(err).toBeInstanceOf(CairnError);
    return err as CairnError;
  }
  throw new Error('expected loadSettings to throw');
}

describe('loadSettings', () => {
  it('with no cairn.json and no environment: defaults and the offline model for both roles', () => {
    const dir = home();
    const settings = loadSettings({ home: dir, env: {} });
    expect(settings.home).toBe(dir);
    expect(settings.agentsDir).toBe(join(dir, 'agents'));
    expect(settings.server).toEqual({
      host: '127.0.0.1',
      port: 5050,
      apiKey: null,
      bodyLimitBytes: DEFAULT_BODY_LIMIT_BYTES,
      rateLimit: null,
      maxStreams: 200,
      streamBufferBytes: 1_048_576,
      publicUrl: null,
      allowedHosts: [],
      corsOrigins: [],
      trustProxy: false,
      requestTimeoutMs: 60_000,
      importMaxBytes: DEFAULT_IMPORT_MAX_BYTES,
      importDayBytes: DEFAULT_IMPORT_DAY_BYTES,
    });
    expect(settings.database).toEqual({
      kind: 'sqlite',
      path: join(dir, 'data', 'cairn.db'),
      url: null,
      poolSize: 10,
      cacheMb: 16,
    });
    expect(settings.models.main).toMatchObject({
      provider: 'offline',
      model: 'offline',
      baseURL: null,
      apiKey: null,
      contextWindow: DEFAULT_CONTEXT_WINDOW_TOKENS,
      profile: 'openai',
    });
    expect(settings.models.compact).toBe(settings.models.main);
  });

  it('reads a full cairn.json example, and compact falls back to main field by field', () => {
    const dir = home({
      server: {
        host: '127.0.0.1',
        port: 6060,
        apiKey: null,
        bodyLimitBytes: 2048,
        rateLimit: { max: 100, windowMs: 60000 },
        maxStreams: 5,
        streamBufferBytes: 65536,
      },
      database: { path: 'db/here.db' },
      models: {
        main: {
          baseURL: 'http://127.0.0.1:11434/v1',
          model: 'qwen2.5:7b',
          apiKeyEnv: 'OPENAI_API_KEY',
          contextWindow: 32768,
          timeoutMs: 120000,
          maxRetries: 3,
        },
        compact: { model: 'qwen2.5:3b' },
      },
    });
    const settings = loadSettings({ home: dir, env: { OPENAI_API_KEY: 'sk-test' } });
    expect(settings.server).toEqual({
      host: '127.0.0.1',
      port: 6060,
      apiKey: null,
      bodyLimitBytes: 2048,
      rateLimit: { max: 100, windowMs: 60000 },
      maxStreams: 5,
      streamBufferBytes: 65536,
      publicUrl: null,
      allowedHosts: [],
      corsOrigins: [],
      trustProxy: false,
      requestTimeoutMs: 60_000,
      importMaxBytes: DEFAULT_IMPORT_MAX_BYTES,
      importDayBytes: DEFAULT_IMPORT_DAY_BYTES,
    });
    expect(settings.database.path).toBe(join(dir, 'db', 'here.db'));
    expect(settings.models.main).toMatchObject({
      provider: 'openai',
      baseURL: 'http://127.0.0.1:11434/v1',
      model: 'qwen2.5:7b',
      apiKey: 'sk-test',
      contextWindow: 32768,
      timeoutMs: 120000,
      maxRetries: 3,
    });
    // Only the model differs; everything else comes from main.
    expect(settings.models.compact).toEqual({ ...settings.models.main, model: 'qwen2.5:3b' });
  });

  it('a compact role may point at another endpoint and keep main for the rest', () => {
    const dir = home({
      models: {
        main: { baseURL: 'http://main/v1', model: 'big', contextWindow: 65536, maxRetries: 1 },
        compact: { baseURL: 'http://small/v1', apiKeyEnv: 'SMALL_KEY', timeoutMs: 5000 },
      },
    });
    const { main, compact } = loadSettings({ home: dir, env: { SMALL_KEY: 'k-small' } }).models;
    expect(compact).toMatchObject({
      provider: 'openai',
      baseURL: 'http://small/v1',
      model: 'big',
      apiKeyEnv: 'SMALL_KEY',
      apiKey: 'k-small',
      contextWindow: 65536,
      timeoutMs: 5000,
      maxRetries: 1,
    });
    expect(main.apiKey).toBeNull();
  });

  it('environment variables override cairn.json', () => {
    const dir = home({
      server: { host: '127.0.0.1', port: 6060, apiKey: 'from-file' },
      database: { path: 'file.db' },
      models: { main: { baseURL: 'http://file/v1', model: 'file-model' } },
    });
    const settings = loadSettings({
      home: dir,
      env: {
        CAIRN_HOST: '0.0.0.0',
        CAIRN_PORT: '7070',
        CAIRN_API_KEY: 'from-env',
        CAIRN_DB: '/tmp/elsewhere.db',
        OPENAI_BASE_URL: 'http://env/v1',
        OPENAI_API_KEY: 'sk-env',
        CAIRN_MODEL: 'env-model',
      },
    });
    expect(settings.server).toMatchObject({ host: '0.0.0.0', port: 7070, apiKey: 'from-env' });
    expect(settings.database.path).toBe('/tmp/elsewhere.db');
    expect(settings.models.main).toMatchObject({
      baseURL: 'http://env/v1',
      model: 'env-model',
      apiKey: 'sk-env',
    });
  });

  it('CAIRN_HOME picks the home folder when none is passed', () => {
    const dir = home({ server: { port: 5151 } });
    expect(loadSettings({ env: { CAIRN_HOME: dir } }).server.port).toBe(5151);
  });

  it('an API key alone selects OpenAI at its default endpoint and model', () => {
    const main = loadSettings({ home: home(), env: { OPENAI_API_KEY: 'sk-only' } }).models.main;
    expect(main).toMatchObject({
      provider: 'openai',
      baseURL: DEFAULT_OPENAI_BASE_URL,
      model: DEFAULT_OPENAI_MODEL,
      apiKey: 'sk-only',
    });
  });

  it('blank environment values count as unset', () => {
    const settings = loadSettings({
      home: home(),
      env: { OPENAI_BASE_URL: ' ', OPENAI_API_KEY: '', CAIRN_API_KEY: '', CAIRN_MODEL: '' },
    });
    expect(settings.models.main.provider).toBe('offline');
    expect(settings.server.apiKey).toBeNull();
  });

  it('returns frozen settings and never writes to the environment', () => {
    const env: Record<string, string> = { OPENAI_BASE_URL: 'http://x/v1' };
    const before = { ...process.env };
    const settings = loadSettings({ home: home(), env });
    expect(Object.isFrozen(settings)).toBe(true);
    expect(Object.isFrozen(settings.server)).toBe(true);
    expect(Object.isFrozen(settings.models.main)).toBe(true);
    expect(env).toEqual({ OPENAI_BASE_URL: 'http://x/v1' });
    expect(process.env).toEqual(before);
  });

  it('rejects an unknown property, naming where it is and what it is', () => {
    const err = loadError(home({ server: { port: 5050, prot: 1 } }));
    expect(err.code).toBe('VALIDATION_ERROR');
    expect(err.message).toContain('cairn.json');
    expect(err.message).toContain('/server');
    expect(err.message).toContain('"prot"');
  });

  it.each([
    ['/database', { database: { path: 'x.db', pathh: 'y.db' } }, 'pathh'],
    ['/models', { models: { mian: {} } }, 'mian'],
    ['/models/main', { models: { main: { modle: 'm' } } }, 'modle'],
    [
      '/models/main/pricing',
      { models: { main: { pricing: { inputPerMTok: 1, outputPerMTok: 2, perCall: 1 } } } },
      'perCall',
    ],
    ['/models/main/fallbacks/0', { models: { main: { fallbacks: [{ base: 'x' }] } } }, 'base'],
    ['/records', { records: { keepdays: 3 } }, 'keepdays'],
  ])('rejects an unknown property in %s', (where, file, key) => {
    const err = loadError(home(file));
    expect(err.code).toBe('VALIDATION_ERROR');
    expect(err.message).toContain(where);
    expect(err.message).toContain(`"${key}"`);
  });

  it('rejects wrong types and out-of-range values, each reported', () => {
    const err = loadError(
      home({
        server: { port: 70000, maxStreams: 0, streamBufferBytes: 100 },
        models: { main: { maxRetries: 'three', profile: 'claude' } },
      }),
    );
    expect(err.message).toContain('/server/port');
    expect(err.message).toContain('/server/maxStreams');
    expect(err.message).toContain('/server/streamBufferBytes');
    expect(err.message).toContain('/models/main/maxRetries');
    expect(err.message).toContain('/models/main/profile');
  });

  it('reads the hosts and origins a browser may use, and refuses a wildcard origin or a bad URL', () => {
    const settings = loadSettings({
      home: home({
        server: {
          publicUrl: 'https://cairn.example.com',
          allowedHosts: ['cairn.internal', '.corp.example'],
          corsOrigins: ['https://chat.example.com'],
        },
      }),
      env: {},
    });
    expect(settings.server).toMatchObject({
      publicUrl: 'https://cairn.example.com',
      allowedHosts: ['cairn.internal', '.corp.example'],
      corsOrigins: ['https://chat.example.com'],
    });
    expect(
      loadSettings({ home: home({}), env: { CAIRN_PUBLIC_URL: 'http://10.0.0.5:5050' } }).server
        .publicUrl,
    ).toBe('http://10.0.0.5:5050');
    const err = loadError(
      home({
        server: {
          corsOrigins: ['*', 'https://chat.example.com/path'],
          publicUrl: 'cairn.example.com',
        },
      }),
    );
    expect(err.message).toContain('/server/corsOrigins/0');
    expect(err.message).toContain('/server/corsOrigins/1');
    expect(err.message).toContain('/server/publicUrl');
    expect(() =>
      loadSettings({ home: home({}), env: { CAIRN_PUBLIC_URL: 'ftp://cairn.example.com' } }),
    ).toThrow(/server.publicUrl must be an http\(s\) URL/);
  });

  it('rejects a cairn.json that is not JSON', () => {
    const err = loadError(home('{ "server": '));
    expect(err.code).toBe('VALIDATION_ERROR');
    expect(err.message).toMatch(/not valid JSON/);
  });

  it('places a syntax error of cairn.json at its line and column', () => {
    const dir = home('{\n  "server": {\n    "port": 5050,\n  }\n}\n');
    const err = loadError(dir);
    expect(err.code).toBe('VALIDATION_ERROR');
    expect(err.message).toBe(
      `${join(dir, 'cairn.json')}:4:3: not valid JSON: Expected double-quoted property name`,
    );
  });

  it('reports every problem of cairn.json at once, top to bottom, each at its line and column, with what a misspelt key meant', () => {
    const dir = home(
      [
        '{',
        '  "server": {',
        '    "prot": 5050,',
        '    "maxStreams": 0',
        '  },',
        '  "modles": {},',
        '  "records": { "keepdays": 3, "enabled": "yes" },',
        '  "telemetry": { "anything": 1 }',
        '}',
      ].join('\n'),
    );
    const file = join(dir, 'cairn.json');
    const err = loadError(dir);
    expect(err.code).toBe('VALIDATION_ERROR');
    expect(err.message.split('\n  ')).toEqual([
      'Invalid settings:',
      `${file}:3:5: /server has an unknown property "prot"; did you mean "port"?`,
      `${file}:4:19: /server/maxStreams must be >= 1`,
      `${file}:6:3: / has an unknown property "modles"; did you mean "models"?`,
      `${file}:7:16: /records has an unknown property "keepdays"; did you mean "keepDays"?`,
      `${file}:7:42: /records/enabled must be boolean`,
      `${file}:8:18: /telemetry has an unknown property "anything"`,
    ]);
  });

  it('rejects a CAIRN_PORT that is not a port', () => {
    for (const port of ['http', '-1', '65536', '50.5']) {
      expect(loadError(home(), { CAIRN_PORT: port }).message).toContain('CAIRN_PORT');
    }
  });

  it('DATABASE_URL selects postgres; an unreachable server stops the start with DATABASE_UNAVAILABLE, never printing the password', async () => {
    const settings = loadSettings({
      home: home({ database: { poolSize: 3 } }),
      env: { DATABASE_URL: 'postgres://u:secret@127.0.0.1:1/cairn' },
    });
    expect(settings.database).toMatchObject({
      kind: 'postgres',
      url: 'postgres://u:secret@127.0.0.1:1/cairn',
      poolSize: 3,
    });
    const err = await startApp(settings, { logger: false, daemons: false }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CairnError);
    expect((err as CairnError).code).toBe('DATABASE_UNAVAILABLE');
    expect((err as CairnError).message).not.toContain('secret');
  });

  it('database.cacheMb sizes the SQLite page cache; a size that is not a positive integer is refused', () => {
    expect(loadSettings({ home: home({ database: { cacheMb: 4 } }) }).database.cacheMb).toBe(4);
    for (const cacheMb of [0, -1, 2.5, '16', 5000]) {
      const err = loadError(home({ database: { cacheMb } }));
      expect(err.code).toBe('VALIDATION_ERROR');
      expect(err.message).toContain('/database/cacheMb');
    }
  });

  it('rejects a database.poolSize that is not a positive integer', () => {
    for (const poolSize of [0, -1, 2.5, '10']) {
      const err = loadError(home({ database: { poolSize } }));
      expect(err.code).toBe('VALIDATION_ERROR');
      expect(err.message).toContain('/database/poolSize');
    }
  });
});

describe('describeModelRole (the startup log line)', () => {
  it('names the model and endpoint, never the key', () => {
    const settings = loadSettings({
      home: home({ models: { main: { baseURL: 'http://llm/v1', model: 'm1' } } }),
      env: { OPENAI_API_KEY: 'sk-sentinel-123' },
    });
    const line = describeModelRole(settings.models.main);
    expect(line).toContain('m1');
    expect(line).toContain('http://llm/v1');
    expect(line).not.toContain('sk-sentinel-123');
    expect(describeModelRole(loadSettings({ home: home(), env: {} }).models.main)).toMatch(
      /offline/,
    );
  });
});
