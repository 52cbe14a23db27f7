/**
 * POST /v1/chat/completions: an agent answering as a model, in OpenAI's
 * `chat.completion` shape or as `chat.completion.chunk` events ending with
 * `data: [DONE]` (usage in a last chunk when `stream_options.include_usage`).
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { TokenUsage } from '../llm/messages.js';
import { readChatCompletionRequest } from './chat-request.js';
import {
  postedPrincipal,
  traceparentOf,
  type ConversationResult,
  type Conversations,
} from './conversations.js';
import { principalOf } from '../http/principal.js';
import { toOpenAIError } from './errors.js';
import { logFailure } from '../http/errors.js';
import { disconnectSignal, OpenAIEventStream, SESSION_HEADER } from './event-stream.js';
import type { StreamGate } from '../http/stream-gate.js';
import { markTurnFailed } from '../http/turn-outcome.js';

function completionUsage(usage: TokenUsage) {
  return {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
    // What the agent's provider served from its prompt cache, when it said.
    ...(usage.cache_read_tokens !== undefined
      ? { prompt_tokens_details: { cached_tokens: usage.cache_read_tokens } }
      : {}),
  };
}

function wireToolCalls(result: ConversationResult) {
  return result.calls.map((call) => ({
    id: call.id,
    type: 'function' as const,
    function: { name: call.function.name, arguments: call.function.arguments },
  }));
}

/** The non-streamed `chat.completion` object. */
export function chatCompletion(
  id: string,
  created: number,
  model: string,
  result: ConversationResult,
) {
  const toolCalls = wireToolCalls(result);
  return {
    id,
    object: 'chat.completion' as const,
    created,
    model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant' as const,
          content: result.finish === 'tool_calls' && result.reply === '' ? null : result.reply,
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        logprobs: null,
        finish_reason: result.finish,
      },
    ],
    usage: completionUsage(result.usage),
  };
}

export function chatCompletionRoutes(
  app: FastifyInstance,
  deps: { conversations: Conversations; streams: StreamGate },
): void {
  app.post('/chat/completions', async (request, reply) => {
    const input = readChatCompletionRequest(request.body);
    const header = request.headers[SESSION_HEADER];
    const prepared = await deps.conversations.prepare({
      principal: postedPrincipal(principalOf(request), request.body),
      agentName: input.agentName,
      messages: input.messages,
      clientTools: input.clientTools,
      ...(typeof header === 'string' && header !== '' ? { sessionId: header } : {}),
      ...(input.temperature !== undefined ? { temperature: input.temperature } : {}),
    });
    const id = `chatcmpl-${randomBytes(12).toString('hex')}`;
    const created = Math.floor(Date.now() / 1000);
    const model = input.agentName;
    const signal = disconnectSignal(reply);
    const trace = traceparentOf(request.headers);

    if (!input.stream) {
      // Set before the turn runs, so a failed turn's error still names its session.
      void reply.header(SESSION_HEADER, prepared.session.id);
      const result = await prepared.run({ stream: false, signal, ...trace });
      return chatCompletion(id, created, model, result);
    }

    const stream = new OpenAIEventStream(reply, deps.streams, prepared.session.id);
    const chunk = (delta: Record<string, unknown>, finishReason: string | null) => ({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(input.includeUsage ? { usage: null } : {}),
    });
    stream.send(chunk({ role: 'assistant', content: '' }, null));
    try {
      const result = await prepared.run({
        stream: true,
        signal,
        ...trace,
        onDelta: (text) => stream.send(chunk({ content: text }, null)),
      });
      const toolCalls = wireToolCalls(result);
      if (toolCalls.length > 0) {
        stream.send(
          chunk({ tool_calls: toolCalls.map((call, index) => ({ index, ...call })) }, null),
        );
      }
      stream.send(chunk({}, result.finish));
      if (input.includeUsage) {
        stream.send({
          id,
          object: 'chat.completion.chunk',
          created,
          model,
          choices: [],
          usage: completionUsage(result.usage),
        });
      }
      stream.end(true);
    } catch (err) {
      // Headers are gone: OpenAI reports a failure mid-stream as an error event.
      const [status, body] = toOpenAIError(err, request.id);
      markTurnFailed(request);
      logFailure(request, err, status, 'streamed completion failed');
      stream.send(body);
      stream.end(false);
    }
    return reply;
  });
}
