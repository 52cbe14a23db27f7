/**
 * An OpenAI client's own tools (the request's `tools`), offered to the model
 * beside the agent's. Cairn never runs them: a call to one stops the turn with
 * the call open, and the client answers it with a `tool` message in its next
 * request (DESIGN §10).
 */
import type { ToolSpec } from '../llm/messages.js';
import { outsideAnswer, type Tool } from '../tools/tool.js';
import { ToolSet } from '../tools/tool-set.js';
import { InvalidRequestError } from './errors.js';

/** Wraps the client's tool specs as tools the loop stops on; rejects schemas that do not compile. */
export function clientTools(specs: readonly ToolSpec[]): Tool[] {
  const seen = new Set<string>();
  return specs.map((spec, i) => {
    if (seen.has(spec.name))
      throw new InvalidRequestError(`tools[${i}].function.name "${spec.name}" is declared twice.`, {
        param: `tools[${i}].function.name`,
      });
    seen.add(spec.name);
    const tool: Tool = {
      name: spec.name,
      description: spec.description,
      parameters: spec.parameters,
      run: async () => outsideAnswer(),
    };
    try {
      // Compiles the argument validator now, so a bad schema is the client's 400, not a failed turn.
      new ToolSet([tool]).parseArguments(tool, '{}');
    } catch (err) {
      throw new InvalidRequestError(
        `tools[${i}].function.parameters is not a valid JSON Schema: ${(err as Error).message}`,
        { param: `tools[${i}].function.parameters` },
      );
    }
    return tool;
  });
}
