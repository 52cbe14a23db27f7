/**
 * The `embed` model role in cairn.json: absent unless configured (never
 * inherited from `main`), OpenAI's defaults when only `model` or `baseURL`
 * is given, `local` with its one model and no endpoint, and the mistakes
 * reported as VALIDATION_ERROR naming the field.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_EMBED_TIMEOUT_MS,
  DEFAULT_OPENAI_EMBED_MODEL,
  LOCAL_EMBED_MODEL,
  loadSettings,
} from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';

const dirs: string[] = [];
function home(cairnJson: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-embed-config-'));
  dirs.push(dir);
  writeFileSync(join(dir, 'cairn.json'), JSON.stringify(cairnJson));
  return dir;
}
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function refusal(cairnJson: unknown): CairnError {
  try {
    loadSettings({ home: home(cairnJson), env: {} });
  } catch (err) {
    if (err instanceof CairnError) return err;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('models.embed', () => {
  it('is null unless configured, even with a main model and a key', () => {
    const settings = loadSettings({
      home: home({ models: { main: { baseURL: 'http://127.0.0.1:9/v1', model: 'm' } } }),
      env: { OPENAI_API_KEY: 'sk-test' },
    });
    expect(settings.models.embed).toBeNull();
  });

  it('openai: its own defaults, its own key variable and timeout, pricing by input tokens', () => {
    const { embed } = loadSettings({
      home: home({
        models: {
          main: { baseURL: 'http://127.0.0.1:9/v1', timeoutMs: 99_000 },
          embed: { apiKeyEnv: 'EMBED_KEY', dimensions: 256, pricing: { inputPerMTok: 0.02 } },
        },
      }),
      env: { EMBED_KEY: 'k-embed', OPENAI_API_KEY: 'k-main' },
    }).models;
    expect(embed).toEqual({
      provider: 'openai',
      baseURL: 'https://api.openai.com/v1',
      model: DEFAULT_OPENAI_EMBED_MODEL,
      apiKeyEnv: 'EMBED_KEY',
      apiKey: 'k-embed',
      dimensions: 256,
      timeoutMs: DEFAULT_EMBED_TIMEOUT_MS,
      pricing: { inputPerMTok: 0.02, outputPerMTok: 0, cachedInputPerMTok: 0.02 },
    });
  });

  it('local: the bundled model, 512 dimensions, no endpoint', () => {
    const { embed } = loadSettings({
      home: home({ models: { embed: { provider: 'local', timeoutMs: 3_000 } } }),
      env: {},
    }).models;
    expect(embed).toMatchObject({
      provider: 'local',
      baseURL: null,
      model: LOCAL_EMBED_MODEL,
      dimensions: 512,
      timeoutMs: 3_000,
    });
  });

  it('refuses an endpoint or other dimensions for local, an unknown provider or key', () => {
    const withUrl = refusal({
      models: { embed: { provider: 'local', baseURL: 'http://127.0.0.1:9/v1' } },
    });
    expect(withUrl.code).toBe('VALIDATION_ERROR');
    expect(withUrl.message).toContain('baseURL');
    expect(refusal({ models: { embed: { provider: 'local', dimensions: 64 } } }).message).toContain(
      '512',
    );
    const provider = refusal({ models: { embed: { provider: 'anthropic' } } });
    expect(provider.code).toBe('VALIDATION_ERROR');
    expect(provider.message).toContain('/models/embed/provider');
    const misspelt = refusal({ models: { embed: { dimension: 64 } } });
    expect(misspelt.message).toContain('did you mean "dimensions"');
  });
});
