/**
 * POST /v1/responses and GET /v1/responses/:id: OpenAI's Responses API, text
 * in and out (DESIGN §10). A response id names the session and the point of
 * the turn in it (`resp_<seq>_<sessionId>`), so `previous_response_id`
 * continues that session and a response is read back from the stored
 * messages, with no table of its own.
 */
import type { FastifyInstance } from 'fastify';
import type { ChatMessage, TokenUsage } from '../llm/messages.js';
import type { MessageLog, SessionStore } from '../store/store.js';
import type { SessionRow } from '../store/store.js';
import { contentText, readTemperature } from './chat-request.js';
import { postedPrincipal, type ConversationResult, type Conversations } from './conversations.js';
import { owns, principalOf } from '../http/principal.js';
import { InvalidRequestError, toOpenAIError } from './errors.js';
import { disconnectSignal, OpenAIEventStream, SESSION_HEADER } from './event-stream.js';
import type { StreamGate } from '../http/stream-gate.js';
import { markTurnFailed } from '../http/turn-outcome.js';

interface ResponsesInput {
  agentName: string;
  messages: ChatMessage[];
  instructions: string | null;
  previousResponseId: string | null;
  stream: boolean;
  temperature: number | null;
  metadata: Record<string, string>;
}

/** How many stored messages GET /v1/responses/:id reads after the turn's start to find its reply. */
const RESPONSE_READ_LIMIT = 500;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function responseId(sessionId: string, startSeq: number): string {
  return `resp_${startSeq}_${sessionId}`;
}

function parseResponseId(id: string, param: string): { sessionId: string; startSeq: number } {
  const match = /^resp_(\d+)_(sess_[A-Za-z0-9]+)$/.exec(id);
  if (!match) {
    throw new InvalidRequestError(`${param} "${id}" is not a response id issued by this server.`, {
      param,
      status: param === 'response_id' ? 404 : 400,
      code: 'response_not_found',
    });
  }
  return { sessionId: match[2]!, startSeq: Number(match[1]) };
}

function readInputItems(input: unknown): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (!Array.isArray(input) || input.length === 0)
    throw new InvalidRequestError('input must be a string or a non-empty array of messages.', {
      param: 'input',
    });
  return input.map((item: unknown, i): ChatMessage => {
    const at = `input[${i}]`;
    if (!isRecord(item) || (item.type !== undefined && item.type !== 'message'))
      throw new InvalidRequestError(
        `${at}: only message items ({role, content}) are supported; Cairn's Responses API is text in and out.`,
        { param: at },
      );
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
  });
}

function readResponsesRequest(body: unknown): ResponsesInput {
  if (!isRecord(body)) throw new InvalidRequestError('The request body must be a JSON object.');
  if (typeof body.model !== 'string' || body.model === '')
    throw new InvalidRequestError(
      'model is required: the name of a Cairn agent (GET /v1/models).',
      {
        param: 'model',
      },
    );
  if (Array.isArray(body.tools) && body.tools.length > 0)
    throw new InvalidRequestError(
      "tools: Cairn's Responses API is text in and out; use POST /v1/chat/completions for client-side tools.",
      { param: 'tools', code: 'unsupported_parameter' },
    );
  const format = isRecord(body.text) ? body.text.format : undefined;
  if (format !== undefined && (!isRecord(format) || format.type !== 'text'))
    throw new InvalidRequestError('text.format: only {"type":"text"} is supported.', {
      param: 'text.format',
      code: 'unsupported_parameter',
    });
  if (
    body.instructions !== undefined &&
    body.instructions !== null &&
    typeof body.instructions !== 'string'
  )
    throw new InvalidRequestError('instructions must be a string.', { param: 'instructions' });
  if (
    body.previous_response_id !== undefined &&
    body.previous_response_id !== null &&
    typeof body.previous_response_id !== 'string'
  )
    throw new InvalidRequestError('previous_response_id must be a string.', {
      param: 'previous_response_id',
    });
  const metadata: Record<string, string> = {};
  if (isRecord(body.metadata))
    for (const [k, v] of Object.entries(body.metadata)) if (typeof v === 'string') metadata[k] = v;
  const instructions = typeof body.instructions === 'string' ? body.instructions : null;
  return {
    agentName: body.model,
    messages: [
      ...(instructions ? [{ role: 'system' as const, content: instructions }] : []),
      ...readInputItems(body.input),
    ],
    instructions,
    previousResponseId:
      typeof body.previous_response_id === 'string' ? body.previous_response_id : null,
    stream: body.stream === true,
    temperature: readTemperature(body.temperature),
    metadata,
  };
}

interface ResponseFields {
  id: string;
  createdAt: number;
  model: string;
  instructions: string | null;
  previousResponseId: string | null;
  temperature: number | null;
  metadata: Record<string, string>;
}

function outputMessage(id: string, text: string, status: 'in_progress' | 'completed') {
  return {
    type: 'message' as const,
    id,
    status,
    role: 'assistant' as const,
    content:
      status === 'completed'
        ? [{ type: 'output_text' as const, text, annotations: [], logprobs: [] }]
        : [],
  };
}

function responseUsage(usage: TokenUsage) {
  return {
    input_tokens: usage.input_tokens,
    input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
    output_tokens: usage.output_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.input_tokens + usage.output_tokens,
  };
}

/** The `response` object; `text` undefined means still in progress. */
function responseObject(fields: ResponseFields, text: string | undefined, usage?: TokenUsage) {
  const done = text !== undefined;
  return {
    id: fields.id,
    object: 'response' as const,
    created_at: fields.createdAt,
    status: done ? ('completed' as const) : ('in_progress' as const),
    completed_at: done ? Math.floor(Date.now() / 1000) : null,
    error: null,
    incomplete_details: null,
    instructions: fields.instructions,
    model: fields.model,
    output: done ? [outputMessage(messageId(fields.id), text, 'completed')] : [],
    output_text: text ?? '',
    parallel_tool_calls: true,
    previous_response_id: fields.previousResponseId,
    tool_choice: 'auto' as const,
    tools: [],
    temperature: fields.temperature,
    top_p: null,
    metadata: fields.metadata,
    ...(usage ? { usage: responseUsage(usage) } : {}),
  };
}

function messageId(responseIdValue: string): string {
  return `msg_${responseIdValue.slice('resp_'.length)}`;
}

export interface ResponseRouteDeps {
  conversations: Conversations;
  /** GET /responses/:id reads the turn back from the session's log. */
  store: Pick<SessionStore, 'findSession'> & Pick<MessageLog, 'listMessages'>;
  streams: StreamGate;
}

export function responseRoutes(app: FastifyInstance, deps: ResponseRouteDeps): void {
  app.post('/responses', async (request, reply) => {
    const input = readResponsesRequest(request.body);
    const previous = input.previousResponseId
      ? parseResponseId(input.previousResponseId, 'previous_response_id')
      : undefined;
    const header = request.headers[SESSION_HEADER];
    const sessionId =
      previous?.sessionId ?? (typeof header === 'string' && header !== '' ? header : undefined);
    const prepared = await deps.conversations.prepare({
      principal: postedPrincipal(principalOf(request), request.body),
      agentName: input.agentName,
      messages: input.messages,
      clientTools: [],
      ...(sessionId !== undefined ? { sessionId } : {}),
      ...(input.temperature !== null ? { temperature: input.temperature } : {}),
    });
    const signal = disconnectSignal(reply);
    const fieldsAt = (session: SessionRow): ResponseFields => ({
      id: responseId(session.id, session.last_seq),
      createdAt: Math.floor(Date.now() / 1000),
      model: input.agentName,
      instructions: input.instructions,
      previousResponseId: input.previousResponseId,
      temperature: input.temperature,
      metadata: input.metadata,
    });

    if (!input.stream) {
      // Set before the turn runs, so a failed turn's error still names its session.
      void reply.header(SESSION_HEADER, prepared.session.id);
      let fields: ResponseFields | undefined;
      const result = await prepared.run({
        stream: false,
        signal,
        onStart: (session) => (fields = fieldsAt(session)),
      });
      return responseObject(fields!, result.reply, result.usage);
    }

    const stream = new OpenAIEventStream(reply, deps.streams, prepared.session.id);
    let sequence = 0;
    const emit = (type: string, data: Record<string, unknown>): void =>
      stream.send({ type, ...data, sequence_number: sequence++ }, type);
    let fields: ResponseFields | undefined;
    try {
      const result: ConversationResult = await prepared.run({
        stream: true,
        signal,
        onStart: (session) => {
          fields = fieldsAt(session);
          const item = messageId(fields.id);
          emit('response.created', { response: responseObject(fields, undefined) });
          emit('response.in_progress', { response: responseObject(fields, undefined) });
          emit('response.output_item.added', {
            output_index: 0,
            item: outputMessage(item, '', 'in_progress'),
          });
          emit('response.content_part.added', {
            item_id: item,
            output_index: 0,
            content_index: 0,
            part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
          });
        },
        onDelta: (delta) =>
          emit('response.output_text.delta', {
            item_id: messageId(fields!.id),
            output_index: 0,
            content_index: 0,
            delta,
            logprobs: [],
          }),
      });
      const item = messageId(fields!.id);
      const position = { item_id: item, output_index: 0, content_index: 0 };
      emit('response.output_text.done', { ...position, text: result.reply, logprobs: [] });
      emit('response.content_part.done', {
        ...position,
        part: { type: 'output_text', text: result.reply, annotations: [], logprobs: [] },
      });
      emit('response.output_item.done', {
        output_index: 0,
        item: outputMessage(item, result.reply, 'completed'),
      });
      emit('response.completed', { response: responseObject(fields!, result.reply, result.usage) });
    } catch (err) {
      const [status, body] = toOpenAIError(err, request.id);
      markTurnFailed(request);
      if (status >= 500) request.log.error({ code: body.error.code }, 'streamed response failed');
      emit('error', {
        code: body.error.code,
        message: body.error.message,
        param: body.error.param,
      });
    } finally {
      stream.end(false);
    }
    return reply;
  });

  app.get<{ Params: { id: string } }>('/responses/:id', async (request) => {
    const { sessionId, startSeq } = parseResponseId(request.params.id, 'response_id');
    const notFound = () =>
      new InvalidRequestError(`No response "${request.params.id}" on this server.`, {
        status: 404,
        param: 'response_id',
        code: 'response_not_found',
      });
    const session = await deps.store.findSession(sessionId);
    // Another key's response is answered as if it did not exist.
    if (!session || !owns(principalOf(request), session.owner_key)) throw notFound();
    const messages = await deps.store.listMessages(sessionId, {
      afterSeq: startSeq,
      limit: RESPONSE_READ_LIMIT,
    });
    const turn = messages.slice(1);
    const next = turn.findIndex((m) => m.role === 'user');
    const own = next >= 0 ? turn.slice(0, next) : turn;
    if (messages[0] === undefined) throw notFound();
    const answer = [...own]
      .reverse()
      .find((m) => m.role === 'assistant' && !m.tool_calls?.length && m.content !== null);
    const fields: ResponseFields = {
      id: request.params.id,
      createdAt: Math.floor(Date.parse(messages[0].created_at) / 1000),
      model: session.agent_name,
      instructions: null,
      previousResponseId: null,
      temperature: null,
      metadata: {},
    };
    return responseObject(fields, answer?.content ?? undefined);
  });
}
