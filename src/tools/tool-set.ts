/**
 * The tools one agent may call in one run, with argument validation compiled
 * once per tool (src/tools/schema-compiler.ts: a caller's schema by the
 * rules for caller input).
 */
import type { ValidateFunction } from 'ajv';
import type { ToolSpec } from '../llm/messages.js';
import { CairnError } from '../errors.js';
import { compileToolSchema } from './schema-compiler.js';
import type { Tool } from './tool.js';

const validators = new WeakMap<Tool, ValidateFunction>();

function validatorFor(tool: Tool): ValidateFunction {
  let validate = validators.get(tool);
  if (!validate) {
    validate = compileToolSchema(tool.parameters, tool.schemaFrom ?? 'agent');
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
