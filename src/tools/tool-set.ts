/**
 * The tools one agent may call in one run, with argument validation compiled
 * once per tool. Knows nothing of where the tools came from.
 */
import { Ajv, type Options, type ValidateFunction } from 'ajv';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { createRequire } from 'node:module';
import type { ToolSpec } from '../llm/messages.js';
import { CairnError } from '../errors.js';
import type { Tool } from './tool.js';

const AJV_OPTIONS: Options = {
  allErrors: true,
  strict: false,
  coerceTypes: false,
  useDefaults: true,
};

type SchemaCompiler = Pick<Ajv, 'compile'>;

/**
 * One validator per JSON Schema draft, made on first use. Tool schemas come
 * from anywhere (zod 4 and LangChain say draft 2020-12, MCP servers say 07 or
 * nothing), and each draft needs its own ajv class: a 2020-12 `$schema`
 * given to the draft-07 class fails with "no schema with key or ref".
 */
const DRAFTS: Record<string, () => SchemaCompiler> = {
  'https://json-schema.org/draft/2020-12/schema': () => new Ajv2020(AJV_OPTIONS),
  'https://json-schema.org/draft/2019-09/schema': () => new Ajv2019(AJV_OPTIONS),
  'http://json-schema.org/draft-07/schema': () => new Ajv(AJV_OPTIONS),
  'http://json-schema.org/draft-06/schema': () => {
    const ajv = new Ajv(AJV_OPTIONS);
    ajv.addMetaSchema(
      createRequire(import.meta.url)('ajv/dist/refs/json-schema-draft-06.json') as object,
    );
    return ajv;
  },
};

/** The drafts a tool's `$schema` may name, for error messages. */
export const SUPPORTED_SCHEMA_DRAFTS = '2020-12, 2019-09, draft-07 and draft-06';

const compilers = new Map<string, SchemaCompiler>();
const validators = new WeakMap<Tool, ValidateFunction>();

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

function validatorFor(tool: Tool): ValidateFunction {
  let validate = validators.get(tool);
  if (!validate) {
    const key = draftKey(tool.parameters['$schema']);
    let compiler = compilers.get(key);
    if (!compiler) {
      compiler = DRAFTS[key]!();
      compilers.set(key, compiler);
    }
    validate = compiler.compile(tool.parameters);
    validators.set(tool, validate);
  }
  return validate;
}

export type ParsedArguments =
  { ok: true; args: Record<string, unknown> } | { ok: false; error: string };

export class ToolSet {
  private readonly byName: ReadonlyMap<string, Tool>;

  constructor(tools: readonly Tool[]) {
    this.byName = new Map(tools.map((t) => [t.name, t]));
  }

  /** This set plus `extra` (e.g. an OpenAI client's own tools for one turn); names must not clash. */
  with(extra: readonly Tool[]): ToolSet {
    if (extra.length === 0) return this;
    const clash = extra.find((t) => this.byName.has(t.name));
    if (clash) {
      throw new CairnError(
        'VALIDATION_ERROR',
        `The tool name "${clash.name}" is already one of the agent's tools. Rename your tool.`,
      );
    }
    return new ToolSet([...this.byName.values(), ...extra]);
  }

  get size(): number {
    return this.byName.size;
  }

  find(name: string): Tool | undefined {
    return this.byName.get(name);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  specs(): ToolSpec[] {
    return [...this.byName.values()].map((t) => ({
      name: t.name,
      description: t.description,
      parameters: t.parameters,
    }));
  }

  /**
   * Parses and validates a call's raw arguments. `""` means `{}` (some
   * providers send it for tools without parameters).
   */
  parseArguments(tool: Tool, raw: string): ParsedArguments {
    let value: unknown;
    try {
      value = raw.trim() === '' ? {} : JSON.parse(raw);
    } catch {
      return {
        ok: false,
        error: `The arguments are not valid JSON. Send a JSON object matching this schema: ${JSON.stringify(tool.parameters)}`,
      };
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      return {
        ok: false,
        error: `The arguments must be a JSON object matching this schema: ${JSON.stringify(tool.parameters)}`,
      };
    }
    const validate = validatorFor(tool);
    if (!validate(value)) {
      const problems = (validate.errors ?? []).map(
        (e) => `${e.instancePath || '/'} ${e.message ?? 'is invalid'}`,
      );
      return {
        ok: false,
        error: `The arguments do not match the tool's schema (${problems.join('; ')}). Schema: ${JSON.stringify(tool.parameters)}`,
      };
    }
    return { ok: true, args: value as Record<string, unknown> };
  }
}
