/**
 * Validators for OpenAI's response shapes, from the vendored OpenAPI
 * description (test/fixtures/openai-openapi.json), so tests prove that Cairn's
 * `/v1` answers are what OpenAI clients parse. Unlike the request validator,
 * `nullable: true` is kept as "or null" (responses carry many nulls).
 */
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv/dist/2020.js';

const SPEC_URL = new URL('../fixtures/openai-openapi.json', import.meta.url);
const DROPPED = new Set(['discriminator', 'example', 'examples', 'deprecated']);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function convert(node: unknown, isPropertyMap = false): unknown {
  if (Array.isArray(node)) return node.map((item) => convert(item));
  if (!isRecord(node)) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (!isPropertyMap && (DROPPED.has(key) || key.startsWith('x-') || key === 'nullable'))
      continue;
    out[key] = convert(
      value,
      !isPropertyMap && (key === 'properties' || key === 'patternProperties'),
    );
  }
  if (!isPropertyMap && node.nullable === true) return { anyOf: [out, { type: 'null' }] };
  return out;
}

let ajv: InstanceType<typeof Ajv2020.default> | undefined;

/** The validator of `components.schemas[name]`. */
export function openaiSchema(name: string): ValidateFunction {
  if (!ajv) {
    const spec = JSON.parse(readFileSync(SPEC_URL, 'utf8')) as { components: unknown };
    ajv = new Ajv2020.default({ strict: false, validateFormats: false, allErrors: true });
    ajv.addSchema({ $id: 'openai', components: convert(spec.components) });
  }
  const validate = ajv.getSchema(`openai#/components/schemas/${name}`);
  if (!validate) throw new Error(`schema ${name} not found`);
  return validate;
}

/** The problems of `value` against schema `name` (empty when it conforms). */
export function schemaProblems(name: string, value: unknown): string[] {
  const validate = openaiSchema(name);
  if (validate(value)) return [];
  return [...new Set((validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ''}`))];
}
