/**
 * Model roles naming a provider: `anthropic` takes its own defaults (base
 * URL, key variable, model) instead of OpenAI's; compact inherits main and
 * title inherits compact field by field; fallbacks resolve against their role.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  DEFAULT_ANTHROPIC_BASE_URL,
  DEFAULT_ANTHROPIC_MODEL,
  describeModelRole,
  loadSettings,
} from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';

const homes: string[] = [];
function home(cairnJson: unknown): string {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-providers-'));
  homes.push(dir);
  writeFileSync(join(dir, 'cairn.json'), JSON.stringify(cairnJson));
  return dir;
}
afterEach(() => {
  for (const dir of homes.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('models.<role>.provider', () => {
  it('anthropic uses its own base URL, key variable and default model', () => {
    const settings = loadSettings({
      home: home({ models: { main: { provider: 'anthropic' } } }),
      env: { ANTHROPIC_API_KEY: 'sk-ant-x', OPENAI_BASE_URL: 'http://127.0.0.1:1/v1' },
    });
    const main = settings.models.main;
    expect(main).toMatchObject({
      provider: 'anthropic',
      baseURL: DEFAULT_ANTHROPIC_BASE_URL,
      model: DEFAULT_ANTHROPIC_MODEL,
      apiKeyEnv: 'ANTHROPIC_API_KEY',
      apiKey: 'sk-ant-x',
    });
    // compact and title inherit the provider with the rest.
    expect(settings.models.compact.provider).toBe('anthropic');
    expect(settings.models.title.provider).toBe('anthropic');
    expect(describeModelRole(main)).not.toContain('sk-ant-x');
  });

  it('compact may use another provider than main, and title another than compact', () => {
    const settings = loadSettings({
      home: home({
        models: {
          main: { baseURL: 'http://127.0.0.1:11434/v1', model: 'qwen' },
          compact: { provider: 'anthropic', model: 'claude-haiku-4-5' },
          title: { provider: 'openai', model: 'tiny' },
        },
      }),
      env: {},
    });
    expect(settings.models.compact).toMatchObject({
      provider: 'anthropic',
      model: 'claude-haiku-4-5',
      baseURL: DEFAULT_ANTHROPIC_BASE_URL,
    });
    expect(settings.models.title).toMatchObject({ provider: 'openai', model: 'tiny' });
  });

  it('resolves fallbacks against their role and keeps them on the roles that inherit', () => {
    const settings = loadSettings({
      home: home({
        models: {
          main: {
            provider: 'anthropic',
            timeoutMs: 9_000,
            fallbacks: [
              { provider: 'openai', model: 'gpt-4o-mini' },
              { baseURL: 'http://127.0.0.1:9/v1', provider: 'openai', model: 'local' },
            ],
          },
        },
      }),
      env: { OPENAI_API_KEY: 'sk-o' },
    });
    const [first, second] = settings.models.main.fallbacks!;
    expect(first).toMatchObject({
      provider: 'openai',
      model: 'gpt-4o-mini',
      baseURL: 'https://api.openai.com/v1',
      apiKey: 'sk-o',
      timeoutMs: 9_000,
    });
    expect(second).toMatchObject({ baseURL: 'http://127.0.0.1:9/v1', model: 'local' });
    expect(settings.models.compact.fallbacks).toHaveLength(2);
    expect(describeModelRole(settings.models.main)).toMatch(/falling back to gpt-4o-mini/);
  });

  it('refuses an unknown provider or an unknown fallback field with the path', () => {
    const bad = (models: unknown): CairnError => {
      try {
        loadSettings({ home: home({ models }), env: {} });
      } catch (err) {
        return err as CairnError;
      }
      throw new Error('expected a validation error');
    };
    const unknownProvider = bad({ main: { provider: 'bedrock' } });
    expect(unknownProvider.code).toBe('VALIDATION_ERROR');
    expect(unknownProvider.message).toContain('/models/main/provider');
    const unknownField = bad({ main: { fallbacks: [{ model: 'x', color: 'red' }] } });
    expect(unknownField.message).toContain('/models/main/fallbacks/0');
  });
});
