/**
 * Compiles a tool's argument schema into a validator, each schema with a
 * compiler of its own: nothing one schema declares (`$id`, `$defs`) is seen
 * by another, and a validator is garbage with the tool it belongs to. Schemas
 * a caller sends (an OpenAI client's tools) are data, not code: capped in
 * depth and size, and their `pattern`, `patternProperties` and `format` are
 * never executed (a backtracking pattern checked against model arguments
 * would stall the event loop for every tenant); types, required fields and
 * the rest still hold.
 */
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import type { RegExpEngine } from 'ajv/dist/types/index.js';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { createRequire } from 'node:module';
import { jsonDepth } from '../json-depth.js';

/** How deeply a caller's schema may nest (objects and arrays), counted from its top. */
export const CALLER_SCHEMA_MAX_DEPTH = 32;
/** The longest a caller's schema may be, as JSON text (UTF-16 code units). */
export const CALLER_SCHEMA_MAX_CHARS = 65_536;

/** The drafts a tool's `$schema` may name, for error messages. */
export const SUPPORTED_SCHEMA_DRAFTS = '2020-12, 2019-09, draft-07 and draft-06';

/** A caller's schema over a cap: the caller's mistake (400), not a bad schema. */
export class CallerSchemaTooLargeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CallerSchemaTooLargeError';
  }
}

const BASE_OPTIONS: Options = {
  allErrors: true,
  strict: false,
  coerceTypes: false,
  useDefaults: true,
  // Checked once, against the draft's meta-schema, by a checker that holds
  // nothing else (below): compiling the meta-schema per schema costs 30 ms.
  validateSchema: false,
};

/**
 * The regular-expression engine of caller schemas: it runs nothing and
 * matches everything, so a `pattern` never constrains and never costs.
 */
const NO_REGEX: RegExpEngine = Object.assign(() => ({ test: () => true }), {
  code: 'cairn-no-regex',
});

const CALLER_OPTIONS: Options = {
  ...BASE_OPTIONS,
  validateFormats: false,
  code: { regExp: NO_REGEX },
};

type DraftClass = new (options: Options) => Ajv;

const DRAFT_06_META = (): object =>
  createRequire(import.meta.url)('ajv/dist/refs/json-schema-draft-06.json') as object;

/**
 * Each draft needs its own ajv class: a 2020-12 `$schema` given to the
 * draft-07 class fails with "no schema with key or ref".
 */
const DRAFTS: Record<string, { Class: DraftClass; extraMeta?: () => object }> = {
  'https://json-schema.org/draft/2020-12/schema': { Class: Ajv2020 },
  'https://json-schema.org/draft/2019-09/schema': { Class: Ajv2019 },
  'http://json-schema.org/draft-07/schema': { Class: Ajv },
  'http://json-schema.org/draft-06/schema': { Class: Ajv, extraMeta: DRAFT_06_META },
};

/** `$schema` as a key of DRAFTS: the trailing `#` and http/https differences do not matter. */
function draftKey(schema: unknown): string {
  if (typeof schema !== 'string') return 'http://json-schema.org/draft-07/schema';
  const bare = schema.replace(/#$/, '');
  const known = Object.keys(DRAFTS).find(
    (key) => key.replace(/^https?:/, '') === bare.replace(/^https?:/, ''),
  );
  if (known === undefined)
    throw new Error(
      `$schema "${schema}" is not a JSON Schema draft Cairn validates (${SUPPORTED_SCHEMA_DRAFTS}).`,
    );
  return known;
}

function newCompiler(key: string, options: Options): Ajv {
  const draft = DRAFTS[key]!;
  const ajv = new draft.Class(options);
  if (draft.extraMeta) ajv.addMetaSchema(draft.extraMeta());
  return ajv;
}

/**
 * One checker per draft, holding the meta-schemas only: `validateSchema`
 * never adds the schema it checks, so no caller's `$id` lands here.
 */
const metaCheckers = new Map<string, Ajv>();

function checkAgainstMeta(key: string, schema: Record<string, unknown>): void {
  let checker = metaCheckers.get(key);
  if (!checker) {
    checker = newCompiler(key, { ...BASE_OPTIONS, validateSchema: true, validateFormats: false });
    metaCheckers.set(key, checker);
  }
  if (!checker.validateSchema(schema))
    throw new Error(`schema is invalid: ${checker.errorsText(checker.errors)}`);
}

/** Keywords whose value is one schema, a list of schemas, or a map of names to schemas. */
const ONE_SCHEMA = [
  'additionalItems',
  'additionalProperties',
  'contains',
  'else',
  'if',
  'items',
  'not',
  'propertyNames',
  'then',
  'unevaluatedItems',
  'unevaluatedProperties',
];
const SCHEMA_LISTS = ['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items'];
const SCHEMA_MAPS = ['$defs', 'definitions', 'dependentSchemas', 'dependencies', 'properties'];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A copy of a caller's schema without `patternProperties`: with no regular
 * expressions run, no property name can be said to match one, so the
 * properties they would govern are let through (as is every property where
 * `additionalProperties` or `unevaluatedProperties` sat beside them).
 */
function withoutPatternProperties(schema: unknown): unknown {
  if (!isRecord(schema)) return schema;
  const copy: Record<string, unknown> = { ...schema };
  if ('patternProperties' in copy) {
    delete copy['patternProperties'];
    delete copy['additionalProperties'];
    delete copy['unevaluatedProperties'];
  }
  for (const keyword of ONE_SCHEMA)
    if (isRecord(copy[keyword])) copy[keyword] = withoutPatternProperties(copy[keyword]);
  for (const keyword of SCHEMA_LISTS) {
    const list = copy[keyword];
    if (Array.isArray(list)) copy[keyword] = list.map(withoutPatternProperties);
  }
  for (const keyword of SCHEMA_MAPS) {
    const map = copy[keyword];
    if (isRecord(map))
      copy[keyword] = Object.fromEntries(
        Object.entries(map).map(([name, sub]) => [name, withoutPatternProperties(sub)]),
      );
  }
  return copy;
}

/** Throws CallerSchemaTooLargeError when a caller's schema is over a cap. */
export function checkCallerSchemaCaps(schema: Record<string, unknown>): void {
  const depth = jsonDepth(schema, CALLER_SCHEMA_MAX_DEPTH);
  if (depth > CALLER_SCHEMA_MAX_DEPTH)
    throw new CallerSchemaTooLargeError(
      `nests deeper than ${CALLER_SCHEMA_MAX_DEPTH} levels (the limit for a tool schema).`,
    );
  const chars = JSON.stringify(schema).length;
  if (chars > CALLER_SCHEMA_MAX_CHARS)
    throw new CallerSchemaTooLargeError(
      `is ${chars} characters of JSON; a tool schema may have at most ${CALLER_SCHEMA_MAX_CHARS}.`,
    );
}

/**
 * The validator of one tool's arguments. `from: 'caller'` for a schema a
 * request carried: caps checked, no regular expression or format run.
 * Throws when the schema is not a valid schema of its draft.
 */
export function compileToolSchema(
  schema: Record<string, unknown>,
  from: 'agent' | 'caller',
): ValidateFunction {
  if (from === 'caller') checkCallerSchemaCaps(schema);
  const key = draftKey(schema['$schema']);
  checkAgainstMeta(key, schema);
  if (from === 'agent') return newCompiler(key, BASE_OPTIONS).compile(schema);
  return newCompiler(key, CALLER_OPTIONS).compile(
    withoutPatternProperties(schema) as Record<string, unknown>,
  );
}
