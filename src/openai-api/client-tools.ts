/**
 * An OpenAI client's own tools (the request's `tools`), offered to the model
 * beside the agent's. Cairn never runs them: a call to one stops the turn with
 * the call open, and the client answers it with a `tool` message in its next
 * request, as it would answer OpenAI. Their schemas are caller input: each
 * is compiled for this request alone, within the caps, with no regular
 * expression or format of it ever run (src/tools/schema-compiler.ts).
 */
import type { ToolSpec } from '../llm/messages.js';
import { CallerSchemaTooLargeError } from '../tools/schema-compiler.js';
import { outsideAnswer, type Tool } from '../tools/tool.js';
import { ToolSet } from '../tools/tool-set.js';
import { InvalidRequestError } from './errors.js';

/** The `code` of a 400 for a tool schema over the depth or size cap. */
export const TOOL_SCHEMA_TOO_LARGE = 'tool_schema_too_large';

/**
 * Wraps the client's tool specs as tools the loop stops on; rejects schemas
 * that do not compile. `paramOf(i)` names the i-th tool in errors (its path
 * differs between chat completions and responses).
 */
export function clientTools(
  specs: readonly ToolSpec[],
  paramOf: (index: number) => string = (i) => `tools[${i}].function`,
): Tool[] {
  const seen = new Set<string>();
  return specs.map((spec, i) => {
    if (seen.has(spec.name))
      throw new InvalidRequestError(`${paramOf(i)}.name "${spec.name}" is declared twice.`, {
        param: `${paramOf(i)}.name`,
      });
    seen.add(spec.name);
    const tool: Tool = {
      name: spec.name,
      description: spec.description,
      parameters: spec.parameters,
      schemaFrom: 'caller',
      run: async () => outsideAnswer(),
    };
    try {
      // Compiles the argument validator now, so a bad schema is the client's 400, not a failed turn.
      new ToolSet([tool]).parseArguments(tool, '{}');
    } catch (err) {
      if (err instanceof CallerSchemaTooLargeError)
        throw new InvalidRequestError(`${paramOf(i)}.parameters ${err.message}`, {
          param: `${paramOf(i)}.parameters`,
          code: TOOL_SCHEMA_TOO_LARGE,
        });
      throw new InvalidRequestError(
        `${paramOf(i)}.parameters is not a valid JSON Schema: ${(err as Error).message}`,
        { param: `${paramOf(i)}.parameters` },
      );
    }
    return tool;
  });
}
