/**
 * The settings of what Cairn records and exports about its model calls:
 * `records`, `models.<role>.pricing` and the OTLP trace exporter (cairn.json's
 * `telemetry.otlp` or the standard OTEL_* variables).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';

const homes: string[] = [];
function home(cairnJson: unknown = {}): string {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-observe-'));
  homes.push(dir);
  writeFileSync(join(dir, 'cairn.json'), JSON.stringify(cairnJson));
  return dir;
}
afterEach(() => {
  for (const dir of homes.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function problem(cairnJson: unknown, env: Record<string, string> = {}): string {
  try {
    loadSettings({ home: home(cairnJson), env });
  } catch (err) {
    expect(err).toBeInstanceOf(CairnError);
    expect((err as CairnError).code).toBe('VALIDATION_ERROR');
    return (err as CairnError).message;
  }
  throw new Error('expected a validation error');
}

describe('records, pricing and telemetry settings', () => {
  it('defaults: records on for 30 days, no pricing, no tracing', () => {
    const settings = loadSettings({ home: home(), env: {} });
    expect(settings.records).toEqual({ enabled: true, keepDays: 30 });
    expect(settings.models.main.pricing).toBeNull();
    expect(settings.telemetry.otlp).toBeNull();
  });

  it('reads records and pricing; the compact role takes main pricing unless it sets its own', () => {
    const pricing = { inputPerMTok: 3, outputPerMTok: 15 };
    const settings = loadSettings({
      home: home({
        records: { enabled: false, keepDays: 7 },
        models: { main: { baseURL: 'http://127.0.0.1:1/v1', pricing } },
      }),
      env: {},
    });
    expect(settings.records).toEqual({ enabled: false, keepDays: 7 });
    expect(settings.models.main.pricing).toEqual({ ...pricing, cachedInputPerMTok: 3 });
    expect(settings.models.compact.pricing).toEqual(settings.models.main.pricing);
    const own = loadSettings({
      home: home({
        models: {
          main: { baseURL: 'http://127.0.0.1:1/v1', pricing },
          compact: {
            model: 'small',
            pricing: { inputPerMTok: 0.1, outputPerMTok: 0.4, cachedInputPerMTok: 0.01 },
          },
        },
      }),
      env: {},
    });
    expect(own.models.compact.pricing).toEqual({
      inputPerMTok: 0.1,
      outputPerMTok: 0.4,
      cachedInputPerMTok: 0.01,
    });
  });

  it('refuses bad records, pricing and telemetry settings with their path', () => {
    expect(problem({ records: { keepDays: 0 } })).toContain('keepDays');
    expect(problem({ records: { enabled: 'yes' } })).toContain('enabled');
    expect(problem({ records: { other: 1 } })).toContain('other');
    expect(
      problem({ models: { main: { pricing: { inputPerMTok: -1, outputPerMTok: 1 } } } }),
    ).toContain('inputPerMTok');
    expect(problem({ models: { main: { pricing: { inputPerMTok: 1 } } } })).toContain(
      'outputPerMTok',
    );
    expect(problem({ telemetry: { otlp: { endpoint: 'collector:4318' } } })).toContain('endpoint');
    expect(
      problem({ telemetry: { otlp: { endpoint: 'http://c:4318', protocol: 'grpc' } } }),
    ).toContain('protocol');
    expect(
      problem(
        {},
        { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' },
      ),
    ).toContain('http/protobuf');
  });

  it('turns tracing on from cairn.json or the standard variables, which win', () => {
    const fromFile = loadSettings({
      home: home({
        telemetry: {
          otlp: { endpoint: 'http://collector:4318/', protocol: 'http/json', headers: { a: 'b' } },
        },
      }),
      env: {},
    });
    expect(fromFile.telemetry.otlp).toEqual({
      tracesUrl: 'http://collector:4318/v1/traces',
      protocol: 'http/json',
      headers: { a: 'b' },
      serviceName: 'cairn',
      captureContent: false,
    });
    const fromEnv = loadSettings({
      home: home({ telemetry: { otlp: { endpoint: 'http://file:4318' } } }),
      env: {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://env:4318',
        OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Basic%20abc,x=1',
        OTEL_SERVICE_NAME: 'my-cairn',
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
      },
    });
    expect(fromEnv.telemetry.otlp).toMatchObject({
      tracesUrl: 'http://env:4318/v1/traces',
      protocol: 'http/protobuf',
      headers: { authorization: 'Basic abc', x: '1' },
      serviceName: 'my-cairn',
      captureContent: true,
    });
    const tracesOnly = loadSettings({
      home: home(),
      env: { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:4318/custom' },
    });
    expect(tracesOnly.telemetry.otlp?.tracesUrl).toBe('http://t:4318/custom');
    const disabled = loadSettings({
      home: home(),
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://t:4318', OTEL_SDK_DISABLED: 'true' },
    });
    expect(disabled.telemetry.otlp).toBeNull();
  });
});
