/**
 * Reads an OpenAI `CreateResponse` request into what Cairn runs: the posted
 * input items as chat messages (messages, the model's earlier
 * `function_call` items, the client's `function_call_output` items), the
 * client's function tools, and the few parameters that reach the model.
 * Fields Cairn does not use are ignored; fields that would change behaviour
 * Cairn cannot honour are a 400 naming them.
 */
import type { ChatMessage, ToolSpec } from '../llm/messages.js';
import {
  contentText,
  optionalArray,
  readTemperature,
  rejectMidHistorySystem,
} from './chat-request.js';
import { InvalidRequestError } from './errors.js';

/** A client function tool as the response echoes it back. */
export interface ResponseFunctionTool {
  type: 'function';
  name: string;
  description: string | null;
  parameters: Record<string, unknown>;
  strict: boolean | null;
}

export interface ResponsesInput {
  agentName: string;
  messages: ChatMessage[];
  tools: ResponseFunctionTool[];
  instructions: string | null;
  previousResponseId: string | null;
  stream: boolean;
  temperature: number | null;
  metadata: Record<string, string>;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unsupported(param: string, why: string): InvalidRequestError {
  return new InvalidRequestError(`${param}: ${why}`, { param, code: 'unsupported_parameter' });
}

function messageItem(item: Record<string, unknown>, at: string): ChatMessage {
  const content = contentText(item.content, `${at}.content`);
  switch (item.role) {
    case 'user':
      return { role: 'user', content };
    case 'assistant':
      return { role: 'assistant', content };
    case 'system':
    case 'developer':
      return { role: 'system', content };
    default:
      throw new InvalidRequestError(`${at}.role must be user, assistant, system or developer.`, {
        param: `${at}.role`,
      });
  }
}

function requireString(item: Record<string, unknown>, key: string, at: string): string {
  const value = item[key];
  if (typeof value !== 'string' || value === '')
    throw new InvalidRequestError(`${at}.${key} is required (a string).`, {
      param: `${at}.${key}`,
    });
  return value;
}

/**
 * The input items as chat messages. A `function_call` joins the assistant
 * message before it (one model turn: its text and its calls), as chat
 * completions carries it; a `function_call_output` is that call's tool result.
 */
export function readInputItems(input: unknown): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0)
    throw new InvalidRequestError('input must be a string or a non-empty array of items.', {
      param: 'input',
    });
  const messages: ChatMessage[] = [];
  input.forEach((item: unknown, i) => {
    const at = `input[${i}]`;
    if (!isRecord(item))
      throw new InvalidRequestError(`${at} must be an object.`, {
        param: at,
      });
    switch (item.type ?? 'message') {
      case 'message':
        messages.push(messageItem(item, at));
        return;
      case 'function_call': {
        const call = {
          id: requireString(item, 'call_id', at),
          type: 'function' as const,
          function: {
            name: requireString(item, 'name', at),
            arguments: typeof item.arguments === 'string' ? item.arguments : '',
          },
        };
        const last = messages[messages.length - 1];
        if (last?.role === 'assistant') {
          last.tool_calls = [...(last.tool_calls ?? []), call];
          if (last.content === '') last.content = null;
        } else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        return;
      }
      case 'function_call_output':
        messages.push({
          role: 'tool',
          tool_call_id: requireString(item, 'call_id', at),
          content: contentText(item.output, `${at}.output`),
        });
        return;
      default:
        throw new InvalidRequestError(
          `${at}: items of type "${String(item.type)}" are not supported; send message, function_call and function_call_output items.`,
          { param: at },
        );
    }
  });
  return messages;
}

/** The request's function tools; any other kind of tool is a 400 naming it. */
function readTools(value: unknown): ResponseFunctionTool[] {
  return (optionalArray(value, 'tools') ?? []).map((tool: unknown, i): ResponseFunctionTool => {
    const at = `tools[${i}]`;
    if (!isRecord(tool) || tool.type !== 'function')
      throw unsupported(
        at,
        `only function tools ({type:"function", name, parameters}) are supported${
          isRecord(tool) && typeof tool.type === 'string' ? `, not "${tool.type}"` : ''
        }; the agent's own tools run on the server.`,
      );
    const { name, description, parameters, strict } = tool;
    if (typeof name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(name))
      throw new InvalidRequestError(`${at}.name must match ^[a-zA-Z0-9_-]{1,64}$.`, {
        param: `${at}.name`,
      });
    if (parameters !== undefined && parameters !== null && !isRecord(parameters))
      throw new InvalidRequestError(`${at}.parameters must be a JSON Schema object.`, {
        param: `${at}.parameters`,
      });
    return {
      type: 'function',
      name,
      description: typeof description === 'string' ? description : null,
      parameters: isRecord(parameters) ? parameters : { type: 'object', properties: {} },
      strict: typeof strict === 'boolean' ? strict : null,
    };
  });
}

/** The tools as the loop offers them to the model. */
export function toolSpecs(tools: readonly ResponseFunctionTool[]): ToolSpec[] {
  return tools.map((tool) => ({
    name: tool.name,
    description: tool.description ?? '',
    parameters: tool.parameters,
  }));
}

function optionalString(body: Record<string, unknown>, key: string): string | null {
  const value = body[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string')
    throw new InvalidRequestError(`${key} must be a string.`, { param: key });
  return value;
}

/** Validates and reads a responses request body. */
export function readResponsesRequest(body: unknown): ResponsesInput {
  if (!isRecord(body)) throw new InvalidRequestError('The request body must be a JSON object.');
  if (typeof body.model !== 'string' || body.model === '')
    throw new InvalidRequestError(
      'model is required: the name of a Cairn agent (GET /v1/models).',
      { param: 'model' },
    );
  const format = isRecord(body.text) ? body.text.format : undefined;
  if (format !== undefined && format !== null && (!isRecord(format) || format.type !== 'text'))
    throw unsupported('text.format', 'only {"type":"text"} is supported.');
  const choice = body.tool_choice;
  if (choice !== undefined && choice !== null && choice !== 'auto')
    throw unsupported(
      'tool_choice',
      'only "auto" is supported: the agent decides when to call tools.',
    );
  if (body.conversation !== undefined && body.conversation !== null)
    throw unsupported(
      'conversation',
      'conversations are not available; continue with previous_response_id (or the X-Cairn-Session-Id header).',
    );
  const instructions = optionalString(body, 'instructions');
  const previousResponseId = optionalString(body, 'previous_response_id');
  const metadata: Record<string, string> = {};
  if (isRecord(body.metadata))
    for (const [k, v] of Object.entries(body.metadata)) if (typeof v === 'string') metadata[k] = v;
  const items = readInputItems(body.input);
  rejectMidHistorySystem(items, 'input');
  return {
    agentName: body.model,
    messages: [
      ...(instructions ? [{ role: 'system' as const, content: instructions }] : []),
      ...items,
    ],
    tools: readTools(body.tools),
    instructions,
    previousResponseId,
    stream: body.stream === true,
    temperature: readTemperature(body.temperature),
    metadata,
  };
}
