/**
 * Tool argument validation under each JSON Schema draft a tool may name in
 * `$schema`: zod 4 and LangChain write 2020-12, others 2019-09 or draft-07,
 * MCP servers often nothing. Each case uses a keyword only its draft knows,
 * so validating under the wrong draft would let the bad arguments through.
 */
import { describe, expect, it } from 'vitest';
import { ToolSet } from '../../src/tools/tool-set.js';
import type { Tool } from '../../src/tools/tool.js';

function toolWith(parameters: Record<string, unknown>): Tool {
  return { name: 'probe', description: 'probe', parameters, run: async () => 'ok' };
}

function check(parameters: Record<string, unknown>, args: unknown) {
  const tool = toolWith(parameters);
  return new ToolSet([tool]).parseArguments(tool, JSON.stringify(args));
}

describe('tool schemas of any JSON Schema draft', () => {
  it('2020-12: prefixItems constrains each position', () => {
    const schema = {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      properties: {
        pair: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }] },
      },
    };
    expect(check(schema, { pair: ['a', 1] }).ok).toBe(true);
    expect(check(schema, { pair: [1, 'a'] }).ok).toBe(false);
  });

  it('2019-09: dependentRequired makes one property need another', () => {
    const schema = {
      $schema: 'https://json-schema.org/draft/2019-09/schema',
      type: 'object',
      properties: { card: { type: 'string' }, cvc: { type: 'string' } },
      dependentRequired: { card: ['cvc'] },
    };
    expect(check(schema, { card: '4242', cvc: '123' }).ok).toBe(true);
    expect(check(schema, { card: '4242' }).ok).toBe(false);
  });

  it('draft-07 (with or without the trailing #) and no $schema at all: dependencies', () => {
    for (const $schema of [
      'http://json-schema.org/draft-07/schema#',
      'http://json-schema.org/draft-07/schema',
      undefined,
    ]) {
      const schema = {
        ...($schema ? { $schema } : {}),
        type: 'object',
        properties: { card: { type: 'string' }, cvc: { type: 'string' } },
        dependencies: { card: ['cvc'] },
      };
      expect(check(schema, { card: '4242', cvc: '1' }).ok, String($schema)).toBe(true);
      expect(check(schema, { card: '4242' }).ok, String($schema)).toBe(false);
    }
  });

  it('draft-06 is read too', () => {
    const schema = {
      $schema: 'http://json-schema.org/draft-06/schema#',
      type: 'object',
      properties: { n: { type: 'number', exclusiveMinimum: 0 } },
    };
    expect(check(schema, { n: 1 }).ok).toBe(true);
    expect(check(schema, { n: 0 }).ok).toBe(false);
  });

  it('a draft Cairn does not read is refused, naming the drafts it reads', () => {
    expect(() =>
      check({ $schema: 'http://json-schema.org/draft-04/schema#', type: 'object' }, {}),
    ).toThrow(/2020-12, 2019-09, draft-07 and draft-06/);
  });
});
