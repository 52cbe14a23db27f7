/** JSON Schema fragments shared by the routes. */

export const AGENT_NAME = { type: 'string', pattern: '^[a-z0-9][a-z0-9_-]{0,63}$' } as const;
export const SESSION_ID = { type: 'string', pattern: '^sess_[A-Za-z0-9]{1,64}$' } as const;
export const TASK_ID = { type: 'string', pattern: '^task_[A-Za-z0-9]{1,64}$' } as const;
export const LIMIT = { type: 'integer', minimum: 1, maximum: 500, default: 50 } as const;
export const CURSOR = { type: 'string', minLength: 1, maxLength: 512 } as const;
/** A chat message or task input: large but bounded by the body limit too. */
export const USER_TEXT = {
  type: 'string',
  minLength: 1,
  maxLength: 1_000_000,
  pattern: '\\S',
} as const;

export function objectSchema(
  properties: Record<string, unknown>,
  required: readonly string[] = [],
): Record<string, unknown> {
  return { type: 'object', additionalProperties: false, properties, required };
}

export const agentParams = objectSchema({ name: AGENT_NAME }, ['name']);
export const sessionParams = objectSchema({ id: SESSION_ID }, ['id']);
export const taskParams = objectSchema({ id: TASK_ID }, ['id']);

/**
 * The body of an action that takes no options (reset, close, delete): absent
 * (fastify validates an absent body as `null`) or `{}`. Any field is refused,
 * as unknown fields are everywhere else.
 */
export const NO_OPTIONS_BODY = {
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {},
} as const;
