/**
 * ToolSet argument parsing: what the model sent is checked
 * before anything runs, and every rejection carries the schema so the model
 * can correct itself.
 */
import { describe, expect, it } from 'vitest';
import type { Tool } from '../../src/tools/tool.js';
import { ToolSet } from '../../src/tools/tool-set.js';

const weather: Tool = {
  name: 'weather',
  description: 'Weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1 } },
    required: ['city'],
    additionalProperties: false,
  },
  async run(args) {
    return args;
  },
};
const noArgs: Tool = {
  name: 'ping',
  description: 'No arguments',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() {
    return 'pong';
  },
};
const tools = new ToolSet([weather, noArgs]);
const schemaText = JSON.stringify(weather.parameters);

describe('ToolSet', () => {
  it('finds tools by name and lists their specs', () => {
    expect(tools.size).toBe(2);
    expect(tools.find('weather')).toBe(weather);
    expect(tools.find('nope')).toBeUndefined();
    expect(tools.names()).toEqual(['weather', 'ping']);
    expect(tools.specs()).toEqual([
      { name: 'weather', description: 'Weather for a city', parameters: weather.parameters },
      { name: 'ping', description: 'No arguments', parameters: noArgs.parameters },
    ]);
  });

  it('accepts arguments that match the schema', () => {
    expect(tools.parseArguments(weather, '{"city":"Oslo","days":2}')).toEqual({
      ok: true,
      args: { city: 'Oslo', days: 2 },
    });
  });

  it('reads "" (and blank) arguments as {}', () => {
    expect(tools.parseArguments(noArgs, '')).toEqual({ ok: true, args: {} });
    expect(tools.parseArguments(noArgs, '  ')).toEqual({ ok: true, args: {} });
    // {} still has to satisfy the schema.
    const missing = tools.parseArguments(weather, '');
    expect(missing.ok).toBe(false);
  });

  it.each(['{"city":', 'city=Oslo', '{city: "Oslo"}'])(
    'rejects arguments that are not JSON (%s), with the schema',
    (raw) => {
      const parsed = tools.parseArguments(weather, raw);
      expect(parsed.ok).toBe(false);
      if (parsed.ok) return;
      expect(parsed.error).toMatch(/not valid JSON/);
      expect(parsed.error).toContain(schemaText);
    },
  );

  it.each(['[1,2]', '"Oslo"', '42', 'null', 'true'])(
    'rejects JSON that is not an object (%s), with the schema',
    (raw) => {
      const parsed = tools.parseArguments(weather, raw);
      expect(parsed.ok).toBe(false);
      if (parsed.ok) return;
      expect(parsed.error).toMatch(/must be a JSON object/);
      expect(parsed.error).toContain(schemaText);
    },
  );

  it('rejects arguments that fail the schema, naming each problem and carrying the schema', () => {
    const parsed = tools.parseArguments(weather, '{"days":0,"extra":true}');
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.error).toMatch(/do not match the tool's schema/);
    expect(parsed.error).toMatch(/city/); // the missing required property
    expect(parsed.error).toMatch(/\/days/); // below its minimum
    expect(parsed.error).toMatch(/additional properties/);
    expect(parsed.error).toContain(schemaText);
  });

  it('does not coerce types', () => {
    const parsed = tools.parseArguments(weather, '{"city":"Oslo","days":"2"}');
    expect(parsed.ok).toBe(false);
  });
});
