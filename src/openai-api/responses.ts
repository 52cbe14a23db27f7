/**
 * POST /v1/responses and GET /v1/responses/:id: OpenAI's Responses API, with
 * the client's function tools. A response id names the session and the point
 * of the turn in it (`resp_<seq>_<sessionId>`); each finished response is
 * stored whole with the seq its turn ended at, so `previous_response_id`
 * continues from exactly there: in the same session while it is the latest
 * response, else in a fork of the session up to it (branching, as OpenAI does).
 */
import type { FastifyInstance } from 'fastify';
import type { TokenUsage, ToolCall } from '../llm/messages.js';
import type { MessageLog, ResponseStore, SessionRow, SessionStore } from '../store/store.js';
import { readResponsesRequest, toolSpecs, type ResponseFunctionTool } from './responses-request.js';
import {
  postedPrincipal,
  traceparentOf,
  type ConversationResult,
  type Conversations,
} from './conversations.js';
import { owns, principalOf } from '../http/principal.js';
import { describeError } from '../errors.js';
import { InvalidRequestError, toOpenAIError } from './errors.js';
import { disconnectSignal, OpenAIEventStream, SESSION_HEADER } from './event-stream.js';
import type { StreamGate } from '../http/stream-gate.js';
import { markTurnFailed } from '../http/turn-outcome.js';
import { logFailure } from '../http/errors.js';
import type { TurnEngine } from '../runtime/turn-engine.js';

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

interface ResponseFields {
  id: string;
  createdAt: number;
  model: string;
  instructions: string | null;
  previousResponseId: string | null;
  temperature: number | null;
  metadata: Record<string, string>;
  tools: ResponseFunctionTool[];
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

/** A call to one of the client's tools; its arguments are empty while it is in progress. */
function functionCallItem(id: string, call: ToolCall, status: 'in_progress' | 'completed') {
  return {
    type: 'function_call' as const,
    id,
    call_id: call.id,
    name: call.function.name,
    arguments: status === 'completed' ? call.function.arguments : '',
    status,
  };
}

type OutputItem = ReturnType<typeof outputMessage> | ReturnType<typeof functionCallItem>;

/** What a finished turn answered: its output items, its text, its usage. */
interface ResponseOutcome {
  items: OutputItem[];
  text: string;
  usage?: TokenUsage;
}

/**
 * A finished turn's output: its text as a message (left out when the turn
 * is only calls and streamed no text), then one `function_call` per call to a
 * client tool, which the client answers with `function_call_output` items.
 */
function outcomeOf(fields: ResponseFields, result: ConversationResult, streamedText = false) {
  const items: OutputItem[] = [];
  if (result.reply !== '' || result.calls.length === 0 || streamedText)
    items.push(outputMessage(messageId(fields.id), result.reply, 'completed'));
  result.calls.forEach((call, i) =>
    items.push(functionCallItem(callItemId(fields.id, i), call, 'completed')),
  );
  return { items, text: result.reply, usage: result.usage };
}

function responseUsage(usage: TokenUsage) {
  return {
    input_tokens: usage.input_tokens,
    // What the agent's provider served from (and wrote to) its prompt cache.
    input_tokens_details: {
      cached_tokens: usage.cache_read_tokens ?? 0,
      cache_write_tokens: usage.cache_write_tokens ?? 0,
    },
    output_tokens: usage.output_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: usage.input_tokens + usage.output_tokens,
  };
}

/** Why a response failed, as OpenAI's `response.error` says it. */
interface ResponseFailure {
  code: 'server_error' | 'rate_limit_exceeded';
  message: string;
}

/** The `response` object; no `outcome` means still in progress, or failed with `failure`. */
function responseObject(
  fields: ResponseFields,
  outcome?: ResponseOutcome,
  failure?: ResponseFailure,
) {
  const done = outcome !== undefined;
  return {
    id: fields.id,
    object: 'response' as const,
    created_at: fields.createdAt,
    status: done
      ? ('completed' as const)
      : failure
        ? ('failed' as const)
        : ('in_progress' as const),
    completed_at: done ? Math.floor(Date.now() / 1000) : null,
    error: failure ?? null,
    incomplete_details: null,
    instructions: fields.instructions,
    model: fields.model,
    output: outcome?.items ?? [],
    output_text: outcome?.text ?? '',
    parallel_tool_calls: true,
    previous_response_id: fields.previousResponseId,
    tool_choice: 'auto' as const,
    tools: fields.tools,
    temperature: fields.temperature,
    top_p: null,
    metadata: fields.metadata,
    ...(outcome?.usage ? { usage: responseUsage(outcome.usage) } : {}),
  };
}

function messageId(responseIdValue: string): string {
  return `msg_${responseIdValue.slice('resp_'.length)}`;
}

function callItemId(responseIdValue: string, index: number): string {
  return `fc_${index}_${responseIdValue.slice('resp_'.length)}`;
}

export interface ResponseRouteDeps {
  conversations: Conversations;
  /** Whether a turn runs on a session here: a reply still missing is then in progress. */
  engine: Pick<TurnEngine, 'isBusy'>;
  /** Stored responses; GET /responses/:id of an older response reads the turn back from the session's log. */
  store: Pick<SessionStore, 'findSession'> &
    Pick<MessageLog, 'listMessages'> &
    Pick<ResponseStore, 'saveResponse' | 'findResponse'>;
  streams: StreamGate;
}

export function responseRoutes(app: FastifyInstance, deps: ResponseRouteDeps): void {
  /** Responses this instance issued whose turn still runs (stored once it ends). */
  const running = new Map<string, ResponseFields>();

  /**
   * Where a turn naming `previous_response_id` continues: from the end of that
   * stored response (the conversation forks there if it has moved on since),
   * or, for a response older than the stored ones, at the end of its session.
   */
  async function continuation(previousId: string) {
    const { sessionId } = parseResponseId(previousId, 'previous_response_id');
    const stored = await deps.store.findResponse(previousId);
    return stored
      ? { branch: { sessionId: stored.session_id, atSeq: stored.end_seq } }
      : { sessionId };
  }

  app.post('/responses', async (request, reply) => {
    const input = readResponsesRequest(request.body);
    const header = request.headers[SESSION_HEADER];
    const target = input.previousResponseId
      ? await continuation(input.previousResponseId)
      : typeof header === 'string' && header !== ''
        ? { sessionId: header }
        : {};
    const prepared = await deps.conversations.prepare({
      principal: postedPrincipal(principalOf(request), request.body),
      agentName: input.agentName,
      messages: input.messages,
      clientTools: toolSpecs(input.tools),
      clientToolParam: (i) => `tools[${i}]`,
      ...target,
      ...(input.temperature !== null ? { temperature: input.temperature } : {}),
    });
    const signal = disconnectSignal(reply);
    const trace = traceparentOf(request.headers);
    const fieldsAt = (session: SessionRow): ResponseFields => {
      const fields = issuedFields(session);
      running.set(fields.id, fields);
      return fields;
    };
    const issuedFields = (session: SessionRow): ResponseFields => ({
      id: responseId(session.id, session.last_seq),
      createdAt: Math.floor(Date.now() / 1000),
      model: input.agentName,
      instructions: input.instructions,
      previousResponseId: input.previousResponseId,
      temperature: input.temperature,
      metadata: input.metadata,
      tools: input.tools,
    });
    /** Stores the finished response, so GET returns it whole and a later turn can continue or branch from it. */
    const storeFinished = async (
      fields: ResponseFields,
      result: ConversationResult,
      body: object,
    ) => {
      try {
        await deps.store.saveResponse({
          id: fields.id,
          session_id: result.sessionId,
          end_seq: result.lastSeq,
          body: body as Record<string, unknown>,
        });
      } finally {
        running.delete(fields.id);
      }
    };

    /**
     * Stores a turn that started and then failed (the model, the client going
     * away) as a `failed` response, so reading it back never says
     * `in_progress` for ever. Best effort: the turn's own error is what the
     * client is told.
     */
    const storeFailure = async (fields: ResponseFields | undefined, err: unknown) => {
      if (fields === undefined) return;
      const [, body] = toOpenAIError(err, request.id);
      const failure: ResponseFailure = {
        code: body.error.code === 'rate_limit_exceeded' ? 'rate_limit_exceeded' : 'server_error',
        message: signal.aborted
          ? 'The client went away before the response was finished.'
          : body.error.message,
      };
      try {
        const session = await deps.store.findSession(prepared.session.id);
        if (!session) return;
        await deps.store.saveResponse({
          id: fields.id,
          session_id: session.id,
          end_seq: session.last_seq,
          body: responseObject(fields, undefined, failure),
        });
      } catch (storeErr) {
        request.log.warn({ err: describeError(storeErr) }, 'a failed response was not stored');
      } finally {
        running.delete(fields.id);
      }
    };

    if (!input.stream) {
      // Set before the turn runs, so a failed turn's error still names its session.
      void reply.header(SESSION_HEADER, prepared.session.id);
      let fields: ResponseFields | undefined;
      const result = await prepared
        .run({
          stream: false,
          signal,
          ...trace,
          onStart: (session) => (fields = fieldsAt(session)),
        })
        .catch(async (err: unknown) => {
          await storeFailure(fields, err);
          throw err;
        });
      const body = responseObject(fields!, outcomeOf(fields!, result));
      await storeFinished(fields!, result, body);
      return body;
    }

    const stream = new OpenAIEventStream(reply, deps.streams, prepared.session.id);
    let sequence = 0;
    const emit = (type: string, data: Record<string, unknown>): void =>
      stream.send({ type, ...data, sequence_number: sequence++ }, type);
    let fields: ResponseFields | undefined;
    let nextIndex = 0;
    /** The output index of the text message, once its first delta (or the end) opened it. */
    let textIndex: number | undefined;
    const openText = (): number => {
      if (textIndex !== undefined) return textIndex;
      textIndex = nextIndex++;
      const item = messageId(fields!.id);
      emit('response.output_item.added', {
        output_index: textIndex,
        item: outputMessage(item, '', 'in_progress'),
      });
      emit('response.content_part.added', {
        item_id: item,
        output_index: textIndex,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      });
      return textIndex;
    };
    try {
      const result: ConversationResult = await prepared.run({
        stream: true,
        signal,
        ...trace,
        onStart: (session) => {
          fields = fieldsAt(session);
          emit('response.created', { response: responseObject(fields) });
          emit('response.in_progress', { response: responseObject(fields) });
        },
        onDelta: (delta) =>
          emit('response.output_text.delta', {
            item_id: messageId(fields!.id),
            output_index: openText(),
            content_index: 0,
            delta,
            logprobs: [],
          }),
      });
      const outcome = outcomeOf(fields!, result, textIndex !== undefined);
      for (const item of outcome.items) {
        if (item.type === 'message') {
          const position = { item_id: item.id, output_index: openText(), content_index: 0 };
          emit('response.output_text.done', { ...position, text: result.reply, logprobs: [] });
          emit('response.content_part.done', { ...position, part: item.content[0] });
          emit('response.output_item.done', { output_index: position.output_index, item });
          continue;
        }
        const index = nextIndex++;
        const call = result.calls.find((c) => c.id === item.call_id)!;
        emit('response.output_item.added', {
          output_index: index,
          item: functionCallItem(item.id, call, 'in_progress'),
        });
        emit('response.function_call_arguments.delta', {
          item_id: item.id,
          output_index: index,
          delta: item.arguments,
        });
        emit('response.function_call_arguments.done', {
          item_id: item.id,
          output_index: index,
          name: item.name,
          arguments: item.arguments,
        });
        emit('response.output_item.done', { output_index: index, item });
      }
      const body = responseObject(fields!, outcome);
      await storeFinished(fields!, result, body);
      emit('response.completed', { response: body });
    } catch (err) {
      await storeFailure(fields, err);
      const [status, body] = toOpenAIError(err, request.id);
      markTurnFailed(request);
      logFailure(request, err, status, 'streamed response failed');
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
    const { sessionId } = parseResponseId(request.params.id, 'response_id');
    const stored = await deps.store.findResponse(request.params.id);
    const notFound = () =>
      new InvalidRequestError(`No response "${request.params.id}" on this server.`, {
        status: 404,
        param: 'response_id',
        code: 'response_not_found',
      });
    const session = await deps.store.findSession(stored?.session_id ?? sessionId);
    // Another key's response is answered as if it did not exist.
    if (!session || !owns(principalOf(request), session.owner_key)) throw notFound();
    // Only a response Cairn issued is answered (stored, or still running
    // here): an id of the right shape naming a turn of a native session (a
    // chat, a task) is not a response, and one is never made up for it.
    if (stored) return stored.body;
    const live = running.get(request.params.id);
    if (live) return responseObject(live);
    throw notFound();
  });
}
