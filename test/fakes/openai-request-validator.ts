/**
 * Checks that a chat-completions request body is one a real provider would
 * accept: its shape against OpenAI's published OpenAPI schema, and the
 * message-sequence rules providers enforce that a JSON Schema cannot express
 * (every tool call answered, no orphan tool messages, no blank content, ...).
 *
 * Used by the fake LLM server on every request, and directly by unit tests.
 */
import { readFileSync } from 'node:fs';
import Ajv2020 from 'ajv/dist/2020.js';
import type { ValidateFunction } from 'ajv/dist/2020.js';

/** OpenAI rejects longer ids ("string too long ... maximum length 40"). */
export const MAX_TOOL_CALL_ID_LENGTH = 40;

const OPENAPI_FIXTURE_URL = new URL('../fixtures/openai-openapi.json', import.meta.url);
const REQUEST_SCHEMA_REF = 'openai#/components/schemas/CreateChatCompletionRequest';

/** OpenAPI-only keywords that ajv's 2020-12 dialect does not understand (see vendor/README.md). */
const OPENAPI_ONLY_KEYS = new Set([
  'nullable',
  'discriminator',
  'example',
  'examples',
  'deprecated',
]);

// The spec is 3 MB and takes a while to compile; this is a test helper, so a
// lazy module-level cache is acceptable (and keeps the validator call cheap).
let compiledRequestSchema: ValidateFunction | undefined;

/**
 * Lists every problem with a chat-completions request body; an empty list
 * means a real OpenAI-compatible provider would accept it.
 */
export function validateChatRequest(body: unknown): string[] {
  if (!isRecord(body)) return ['request body must be a JSON object'];
  return [...shapeProblems(body), ...sequenceProblems(body)];
}

function shapeProblems(body: Record<string, unknown>): string[] {
  const validate = getRequestSchema();
  if (validate(body)) return [];
  // A failed `oneOf` over the message roles reports the same complaint once per
  // branch; repeating it adds nothing.
  return [
    ...new Set(
      (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message ?? 'is invalid'}`),
    ),
  ];
}

function getRequestSchema(): ValidateFunction {
  if (compiledRequestSchema) return compiledRequestSchema;
  const spec = JSON.parse(readFileSync(OPENAPI_FIXTURE_URL, 'utf8')) as { components: unknown };
  // ajv is CommonJS: under NodeNext the default import is `module.exports`,
  // whose `.default` is the class.
  const ajv = new Ajv2020.default({ strict: false, validateFormats: false, allErrors: true });
  ajv.addSchema({ $id: 'openai', components: stripOpenApiKeywords(spec.components) });
  const validate = ajv.getSchema(REQUEST_SCHEMA_REF);
  if (!validate)
    throw new Error(`schema ${REQUEST_SCHEMA_REF} not found in ${OPENAPI_FIXTURE_URL.pathname}`);
  compiledRequestSchema = validate;
  return validate;
}

/**
 * Drops OpenAPI-only keywords and `x-*` extensions recursively. Keys of a
 * `properties` map are property names, not keywords, so they are kept (none of
 * the chat schemas has such a property today, but stripping one would silently
 * loosen the schema).
 */
function stripOpenApiKeywords(node: unknown, isPropertyMap = false): unknown {
  if (Array.isArray(node)) return node.map((item) => stripOpenApiKeywords(item));
  if (!isRecord(node)) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (!isPropertyMap && (OPENAPI_ONLY_KEYS.has(key) || key.startsWith('x-'))) continue;
    out[key] = stripOpenApiKeywords(
      value,
      !isPropertyMap && (key === 'properties' || key === 'patternProperties'),
    );
  }
  return out;
}

/** An assistant message whose tool calls are still waiting for their tool messages. */
interface OpenToolTurn {
  index: number;
  ids: Set<string>;
  answered: Set<string>;
}

/**
 * The ordering rules. Messages with a malformed shape are skipped here: the
 * schema check already reports them, and guessing at their meaning would only
 * add noise.
 */
function sequenceProblems(body: Record<string, unknown>): string[] {
  const problems: string[] = [];
  if (Array.isArray(body.tools) && body.tools.length === 0) {
    problems.push('tools must not be an empty array (omit it instead)');
  }
  const messages = body.messages;
  if (!Array.isArray(messages)) return problems;
  if (messages.length === 0) {
    problems.push('messages must not be empty');
    return problems;
  }

  const seenToolCallIds = new Set<string>();
  let openTurn: OpenToolTurn | undefined;
  let seenNonSystem = false;

  const closeTurn = (before: string): void => {
    if (!openTurn) return;
    for (const id of openTurn.ids) {
      if (!openTurn.answered.has(id)) {
        problems.push(
          `messages[${openTurn.index}]: tool call "${id}" has no tool message answering it ${before}`,
        );
      }
    }
    openTurn = undefined;
  };

  messages.forEach((message: unknown, i) => {
    if (!isRecord(message)) return;
    const at = `messages[${i}]`;
    const role = message.role;
    const isFirstNonSystem = !seenNonSystem && role !== 'system' && role !== 'developer';
    if (isFirstNonSystem) seenNonSystem = true;
    if (role !== 'tool') closeTurn(`before ${at}`);

    switch (role) {
      case 'system':
      case 'developer':
      case 'user':
        if (isBlankContent(message.content))
          problems.push(`${at}: ${role} message content must not be empty`);
        break;

      case 'assistant': {
        const toolCalls = message.tool_calls;
        if (Array.isArray(toolCalls) && toolCalls.length === 0) {
          problems.push(`${at}: tool_calls must not be an empty array (omit it instead)`);
        }
        const hasToolCalls = Array.isArray(toolCalls) && toolCalls.length > 0;
        if (!hasToolCalls && isBlankContent(message.content)) {
          problems.push(`${at}: assistant message needs non-empty content or tool_calls`);
        }
        if (!hasToolCalls) break;
        // Providers require the exchange to start from a prompt; a history cut
        // that begins at a tool-calling assistant message has lost that prompt.
        if (isFirstNonSystem) {
          problems.push(
            `${at}: the first non-system message must not be an assistant message with tool_calls`,
          );
        }
        openTurn = { index: i, ids: new Set(), answered: new Set() };
        for (const call of toolCalls) {
          if (!isRecord(call) || typeof call.id !== 'string') continue;
          if (call.id.length > MAX_TOOL_CALL_ID_LENGTH) {
            problems.push(
              `${at}: tool call id "${call.id}" is longer than ${MAX_TOOL_CALL_ID_LENGTH} characters`,
            );
          }
          // OpenAI answers 400 when replayed arguments are not a JSON object
          // (a model's malformed ones): a session that replays `{"key":` is dead there.
          const args = isRecord(call.function) ? call.function.arguments : undefined;
          if (typeof args === 'string' && !isJsonObjectText(args)) {
            problems.push(
              `${at}: tool call "${call.id}" has arguments that are not a JSON object: ${JSON.stringify(args.slice(0, 80))}`,
            );
          }
          if (seenToolCallIds.has(call.id))
            problems.push(`${at}: duplicate tool call id "${call.id}"`);
          seenToolCallIds.add(call.id);
          openTurn.ids.add(call.id);
        }
        break;
      }

      case 'tool': {
        if (typeof message.content !== 'string' || message.content.length === 0) {
          problems.push(`${at}: tool message content must be a non-empty string`);
        }
        const id = message.tool_call_id;
        if (isFirstNonSystem) {
          problems.push(`${at}: the first non-system message must not be a tool message`);
        } else if (!openTurn) {
          problems.push(
            `${at}: tool message (tool_call_id "${String(id)}") does not follow an assistant message with tool_calls`,
          );
        } else if (typeof id !== 'string' || !openTurn.ids.has(id)) {
          problems.push(
            `${at}: tool_call_id "${String(id)}" does not match any tool call of messages[${openTurn.index}]`,
          );
        } else if (openTurn.answered.has(id)) {
          problems.push(`${at}: tool call "${id}" is answered more than once`);
        } else {
          openTurn.answered.add(id);
        }
        break;
      }

      default:
        // Unknown roles are a shape error; `function` is legacy and unchecked.
        break;
    }
  });
  closeTurn('before the end of the request');
  return problems;
}

/** True for missing content, a blank string, or content parts whose text is all blank. */
function isBlankContent(content: unknown): boolean {
  if (content === undefined || content === null) return true;
  if (typeof content === 'string') return content.trim() === '';
  if (Array.isArray(content)) {
    // Non-text parts (images, audio, refusals) count as content.
    return content.every(
      (part) => isRecord(part) && part.type === 'text' && isBlankContent(part.text),
    );
  }
  return false;
}

function isJsonObjectText(text: string): boolean {
  try {
    return isRecord(JSON.parse(text));
  } catch {
    return false;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
