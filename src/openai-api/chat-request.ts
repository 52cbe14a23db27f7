/**
 * Reads an OpenAI `CreateChatCompletionRequest` into what Cairn runs: the
 * agent, the posted messages in Cairn's vocabulary, the client's own tools
 * and the few parameters that reach the model. Fields Cairn does not use are
 * ignored; fields that would change behaviour Cairn cannot honour are a 400
 * naming them (`n > 1`, say), since a client would misread a silent default.
 */
import type { ChatMessage, ToolCall, ToolSpec } from '../llm/messages.js';
import { InvalidRequestError } from './errors.js';

export interface ChatCompletionInput {
  agentName: string;
  messages: ChatMessage[];
  clientTools: ToolSpec[];
  stream: boolean;
  includeUsage: boolean;
  /** Passed to the model in place of the agent's own temperature. */
  temperature?: number;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function unsupported(param: string, why: string): InvalidRequestError {
  return new InvalidRequestError(`${param}: ${why}`, { param, code: 'unsupported_parameter' });
}

/** Parameters that would change what the client gets in ways Cairn cannot honour. */
function rejectUnhonourable(body: Record<string, unknown>): void {
  const present = (key: string): boolean => body[key] !== undefined && body[key] !== null;
  if (present('n') && body.n !== 1)
    throw unsupported('n', 'Cairn returns one choice per request; omit n or set it to 1.');
  if (body.logprobs === true) throw unsupported('logprobs', 'log probabilities are not available.');
  if (present('top_logprobs'))
    throw unsupported('top_logprobs', 'log probabilities are not available.');
  if (
    present('audio') ||
    (Array.isArray(body.modalities) && body.modalities.some((m) => m !== 'text'))
  )
    throw unsupported(present('audio') ? 'audio' : 'modalities', 'only text output is supported.');
  if (present('prediction'))
    throw unsupported('prediction', 'predicted outputs are not supported.');
  if (present('functions') || present('function_call'))
    throw unsupported(
      present('functions') ? 'functions' : 'function_call',
      'the deprecated functions API is not supported; send tools instead.',
    );
  if (present('web_search_options'))
    throw unsupported('web_search_options', 'web search is not available.');
  if (present('response_format')) {
    const format = body.response_format;
    if (!isRecord(format) || format.type !== 'text')
      throw unsupported(
        'response_format',
        'only {"type":"text"} is supported; describe the format in the message instead.',
      );
  }
  if (present('tool_choice') && body.tool_choice !== 'auto')
    throw unsupported(
      'tool_choice',
      'only "auto" is supported: the agent decides when to call tools.',
    );
}

/** The text of a message's content: a string or an array of text parts. */
export function contentText(content: unknown, param: string): string {
  if (typeof content === 'string') return content;
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content))
    throw new InvalidRequestError(`${param} must be a string or an array of content parts.`, {
      param,
    });
  return content
    .map((part: unknown, i) => {
      if (
        isRecord(part) &&
        (part.type === 'text' || part.type === 'input_text' || part.type === 'output_text') &&
        typeof part.text === 'string'
      )
        return part.text;
      throw new InvalidRequestError(
        `${param}[${i}]: only text content parts are supported (got ${isRecord(part) ? String(part.type) : typeof part}).`,
        { param: `${param}[${i}]` },
      );
    })
    .join('');
}

/** An optional array parameter: undefined when absent or null; anything else but an array is a 400. */
export function optionalArray(value: unknown, param: string): unknown[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw new InvalidRequestError(`${param} must be an array.`, { param });
  return value as unknown[];
}

function readToolCalls(value: unknown, param: string): ToolCall[] | undefined {
  return optionalArray(value, param)?.map((call: unknown, i): ToolCall => {
    const at = `${param}[${i}]`;
    if (
      !isRecord(call) ||
      typeof call.id !== 'string' ||
      !isRecord(call.function) ||
      typeof call.function.name !== 'string' ||
      typeof call.function.arguments !== 'string'
    )
      throw new InvalidRequestError(
        `${at} must be {id, type:"function", function:{name, arguments}}.`,
        { param: at },
      );
    return {
      id: call.id,
      type: 'function',
      function: { name: call.function.name, arguments: call.function.arguments },
    };
  });
}

/** One posted message in Cairn's vocabulary (`developer` counts as `system`). */
export function readMessage(value: unknown, param: string): ChatMessage {
  if (!isRecord(value)) throw new InvalidRequestError(`${param} must be an object.`, { param });
  const content = contentText(value.content, `${param}.content`);
  switch (value.role) {
    case 'system':
    case 'developer':
      return { role: 'system', content };
    case 'user':
      return { role: 'user', content };
    case 'assistant': {
      const calls = readToolCalls(value.tool_calls, `${param}.tool_calls`);
      return calls?.length
        ? { role: 'assistant', content: content === '' ? null : content, tool_calls: calls }
        : { role: 'assistant', content };
    }
    case 'tool':
      if (typeof value.tool_call_id !== 'string')
        throw new InvalidRequestError(`${param}.tool_call_id is required on a tool message.`, {
          param: `${param}.tool_call_id`,
        });
      return { role: 'tool', content, tool_call_id: value.tool_call_id };
    default:
      throw new InvalidRequestError(
        `${param}.role must be one of system, developer, user, assistant, tool.`,
        { param: `${param}.role` },
      );
  }
}

/**
 * Refuses a system (or developer) message after the conversation started:
 * Cairn's context puts every system message first, so one in mid-history
 * would silently become an instruction at the top.
 */
export function rejectMidHistorySystem(messages: readonly ChatMessage[], param: string): void {
  const firstOther = messages.findIndex((m) => m.role !== 'system');
  if (firstOther < 0) return;
  const late = messages.findIndex((m, i) => i > firstOther && m.role === 'system');
  if (late >= 0)
    throw new InvalidRequestError(
      `${param}[${late}]: a system or developer message may only open the conversation, before any user, assistant or tool message. Move it to the start (or send it as a user message).`,
      { param: `${param}[${late}]`, code: 'misplaced_system_message' },
    );
}

function readTools(value: unknown): ToolSpec[] {
  return (optionalArray(value, 'tools') ?? []).map((tool: unknown, i): ToolSpec => {
    const at = `tools[${i}]`;
    if (!isRecord(tool) || tool.type !== 'function' || !isRecord(tool.function))
      throw new InvalidRequestError(
        `${at}: only {type:"function", function:{...}} tools are supported.`,
        {
          param: at,
        },
      );
    const { name, description, parameters } = tool.function;
    if (typeof name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(name))
      throw new InvalidRequestError(`${at}.function.name must match ^[a-zA-Z0-9_-]{1,64}$.`, {
        param: `${at}.function.name`,
      });
    if (parameters !== undefined && !isRecord(parameters))
      throw new InvalidRequestError(`${at}.function.parameters must be a JSON Schema object.`, {
        param: `${at}.function.parameters`,
      });
    return {
      name,
      description: typeof description === 'string' ? description : '',
      parameters: parameters ?? { type: 'object', properties: {} },
    };
  });
}

/** `temperature` as OpenAI accepts it (0–2), or null when absent. */
export function readTemperature(value: unknown): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || value < 0 || value > 2)
    throw new InvalidRequestError('temperature must be a number from 0 to 2.', {
      param: 'temperature',
    });
  return value;
}

/** Validates and reads a chat-completions request body. */
export function readChatCompletionRequest(body: unknown): ChatCompletionInput {
  if (!isRecord(body))
    throw new InvalidRequestError('The request body must be a JSON object.', { param: null });
  if (typeof body.model !== 'string' || body.model === '')
    throw new InvalidRequestError(
      'model is required: the name of a Cairn agent (GET /v1/models).',
      {
        param: 'model',
      },
    );
  if (!Array.isArray(body.messages) || body.messages.length === 0)
    throw new InvalidRequestError('messages must be a non-empty array.', { param: 'messages' });
  rejectUnhonourable(body);
  const temperature = readTemperature(body.temperature);
  const options = isRecord(body.stream_options) ? body.stream_options : {};
  const messages = body.messages.map((m: unknown, i) => readMessage(m, `messages[${i}]`));
  rejectMidHistorySystem(messages, 'messages');
  return {
    agentName: body.model,
    messages,
    clientTools: readTools(body.tools),
    stream: body.stream === true,
    includeUsage: options.include_usage === true,
    ...(temperature !== null ? { temperature } : {}),
  };
}
