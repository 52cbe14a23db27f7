/**
 * `ModelClient` for any OpenAI-compatible endpoint, through the official
 * `openai` package. Owns the one retry layer (the client's own retries are
 * off): retry only what is retryable, honour a short `Retry-After`, fail fast
 * on a long one or on exhausted quota, never retry a stream that already
 * emitted text. Errors leave as `CairnError`s with no upstream body or key.
 */
import OpenAI from 'openai';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsBase,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { CairnError } from '../errors.js';
import { linkAbort } from './abort-link.js';
import type { ModelRoleSettings } from '../config/settings.js';
import type { ChatMessage, ToolCall } from './messages.js';
import { bridgeToolToUser } from './wire-profile.js';
import {
  abortableSleep,
  callWithRetries,
  retryAfterMs,
  EmittedError,
  StreamInterruptedError,
  type ClassifiedFailure,
  type ModelLogger,
} from './retry-policy.js';
import type {
  ModelCallOptions,
  ModelClient,
  ModelRequest,
  ModelResponse,
  ModelUsage,
} from './model-client.js';

export { MAX_RETRY_AFTER_MS, retryAfterMs, type ModelLogger } from './retry-policy.js';

export interface OpenAIModelOptions {
  role: ModelRoleSettings;
  logger?: ModelLogger;
  /** Injected in tests to avoid real waiting; defaults to a timer. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  fetch?: typeof fetch;
}

/** The wordings providers use for "the prompt does not fit". */
const CONTEXT_OVERFLOW_PATTERNS = [
  /context[_ ]length[_ ]exceeded/i,
  /maximum context length/i,
  /prompt is too long/i,
  /context window/i,
  /too many tokens/i,
  /exceeds? (the )?(model'?s? )?(maximum )?context/i,
  /reduce the length of the messages/i,
  /input is too long/i,
];

export function isContextOverflowText(text: string): boolean {
  return CONTEXT_OVERFLOW_PATTERNS.some((p) => p.test(text));
}

type APIErrorLike = {
  code?: string | null;
  type?: string;
  message: string;
  error?: unknown;
  headers?: Headers;
  status?: number;
};

/** Everything the upstream error may say, for pattern checks; never sent to clients. */
function upstreamText(err: APIErrorLike): string {
  let body = '';
  try {
    body = JSON.stringify(err.error ?? '');
  } catch {
    body = '';
  }
  return `${err.code ?? ''} ${err.type ?? ''} ${err.message} ${body}`;
}

function classify(err: unknown, role: ModelRoleSettings): ClassifiedFailure {
  if (err instanceof StreamInterruptedError) {
    return { error: new CairnError('LLM_ERROR', err.message, { cause: err }), retryable: true };
  }
  if (err instanceof OpenAI.APIConnectionTimeoutError) {
    return {
      error: new CairnError(
        'LLM_TIMEOUT',
        `The model at ${role.baseURL} did not answer within ${role.timeoutMs} ms. Try again, or raise models.main.timeoutMs.`,
        { cause: err },
      ),
      retryable: true,
    };
  }
  if (err instanceof OpenAI.APIConnectionError) {
    return {
      error: new CairnError(
        'LLM_ERROR',
        `Could not reach the model at ${role.baseURL}. Check OPENAI_BASE_URL and that the model server is running.`,
        { cause: err },
      ),
      retryable: true,
    };
  }
  if (err instanceof OpenAI.APIError) {
    const apiError = err as APIErrorLike;
    const status = apiError.status;
    const text = upstreamText(apiError);
    const code = apiError.code ? `, code ${apiError.code}` : '';
    if (
      (status === 400 || status === 413 || status === 422 || status === undefined) &&
      isContextOverflowText(text)
    ) {
      return {
        error: new CairnError(
          'CONTEXT_OVERFLOW',
          "The conversation no longer fits in the model's context window. Compact the session (POST /sessions/:id/compact) or reset it.",
          { cause: err },
        ),
        retryable: false,
      };
    }
    if (status === 429 && /insufficient_quota|billing|quota/i.test(text)) {
      return {
        error: new CairnError(
          'LLM_ERROR',
          'The model provider reports the account is out of quota or has a billing problem (HTTP 429, insufficient_quota). Check the provider account.',
          { cause: err },
        ),
        retryable: false,
      };
    }
    const retryable =
      status === undefined || status === 408 || status === 409 || status === 429 || status >= 500;
    const delayMs = retryAfterMs(apiError.headers);
    const hint =
      status === 401 || status === 403
        ? " Check the API key (OPENAI_API_KEY or the role's apiKeyEnv)."
        : status === 404
          ? ' Check the model name and OPENAI_BASE_URL.'
          : status === 429
            ? ' The provider is rate limiting; try again later.'
            : '';
    return {
      error: new CairnError(
        'LLM_ERROR',
        `The model provider returned HTTP ${status ?? 'error'}${code}.${hint}`,
        { cause: err },
      ),
      retryable,
      ...(delayMs !== undefined ? { delayMs } : {}),
    };
  }
  if (err instanceof CairnError) return { error: err, retryable: false };
  return {
    error: new CairnError('LLM_ERROR', 'The model call failed unexpectedly.', { cause: err }),
    retryable: false,
  };
}

/** Our stored shape → the wire shape the SDK types expect. */
function toWireMessage(message: ChatMessage): ChatCompletionMessageParam {
  switch (message.role) {
    case 'system':
      return { role: 'system', content: message.content ?? '' };
    case 'user':
      return { role: 'user', content: message.content ?? '' };
    case 'tool':
      return {
        role: 'tool',
        content: message.content ?? '',
        tool_call_id: message.tool_call_id ?? '',
      };
    case 'assistant':
      return message.tool_calls?.length
        ? { role: 'assistant', content: message.content, tool_calls: message.tool_calls }
        : { role: 'assistant', content: message.content ?? '' };
  }
}

function toUsage(
  usage:
    | {
        prompt_tokens: number;
        completion_tokens: number;
        prompt_tokens_details?: { cached_tokens?: number | null } | null;
      }
    | null
    | undefined,
): ModelUsage | null {
  if (!usage) return null;
  const cached = usage.prompt_tokens_details?.cached_tokens;
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    ...(typeof cached === 'number' ? { cache_read_tokens: cached } : {}),
  };
}

export class OpenAIModel implements ModelClient {
  readonly model: string;
  readonly contextWindow: number;
  private readonly client: OpenAI;
  private readonly role: ModelRoleSettings;
  private readonly logger: ModelLogger | undefined;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(options: OpenAIModelOptions) {
    this.role = options.role;
    this.model = options.role.model;
    this.contextWindow = options.role.contextWindow;
    this.logger = options.logger;
    this.sleep = options.sleep ?? abortableSleep;
    this.client = new OpenAI({
      // Local servers (Ollama, llama.cpp) accept any key; the SDK insists on one.
      apiKey: options.role.apiKey ?? 'not-needed',
      baseURL: options.role.baseURL ?? undefined,
      timeout: options.role.timeoutMs,
      maxRetries: 0,
      ...(options.fetch ? { fetch: options.fetch } : {}),
    });
  }

  complete(request: ModelRequest, options: ModelCallOptions = {}): Promise<ModelResponse> {
    return callWithRetries({
      attempts: this.role.maxRetries + 1,
      attempt: () =>
        options.onDelta
          ? this.streamOnce(request, options.onDelta, options)
          : this.completeOnce(request, options),
      classify: (err) => classify(err, this.role),
      sleep: this.sleep,
      signal: options.signal,
      logger: this.logger,
    });
  }

  private params(request: ModelRequest): ChatCompletionCreateParamsBase {
    return {
      model: request.model ?? this.model,
      messages: (this.role.profile === 'mistral'
        ? bridgeToolToUser(request.messages)
        : request.messages
      ).map(toWireMessage),
      ...(request.tools?.length
        ? {
            tools: request.tools.map((t) => ({
              type: 'function' as const,
              function: { name: t.name, description: t.description, parameters: t.parameters },
            })),
          }
        : {}),
      ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
      ...(request.maxTokens !== undefined ? { max_tokens: request.maxTokens } : {}),
      // OpenAI routes calls with one key to one cache; other servers ignore the field.
      ...(request.promptCacheKey !== undefined ? { prompt_cache_key: request.promptCacheKey } : {}),
    };
  }

  private async completeOnce(
    request: ModelRequest,
    { signal, onRequestSent }: ModelCallOptions,
  ): Promise<ModelResponse> {
    // The SDK's timeout ends at the headers; a body that stalls after them
    // would hold the turn (and the session's queue) forever. This deadline
    // bounds the whole call, body included.
    const call = linkAbort(signal);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      call.abort(new OpenAI.APIConnectionTimeoutError({ message: 'model call timed out' }));
    }, this.role.timeoutMs);
    let completion: ChatCompletion;
    const body = { ...this.params(request), stream: false as const };
    onRequestSent?.(body);
    try {
      completion = await this.client.chat.completions.create(body, { signal: call.signal });
    } catch (err) {
      if (timedOut && !signal?.aborted) throw call.signal.reason;
      throw err;
    } finally {
      clearTimeout(timer);
      call.dispose();
    }
    const choice = completion.choices[0];
    if (!choice) throw new CairnError('LLM_ERROR', 'The model returned no choices.');
    const message: ChatMessage = { role: 'assistant', content: choice.message.content ?? null };
    const calls = (choice.message.tool_calls ?? []).filter((c) => c.type === 'function');
    if (calls.length > 0) {
      message.tool_calls = calls.map((c) => ({
        id: c.id,
        type: 'function',
        function: { name: c.function.name, arguments: c.function.arguments },
      }));
    }
    return {
      message,
      finishReason: choice.finish_reason,
      usage: toUsage(completion.usage),
      model: completion.model,
    };
  }

  private async streamOnce(
    request: ModelRequest,
    onDelta: (text: string) => void,
    { signal, onRequestSent }: ModelCallOptions,
  ): Promise<ModelResponse> {
    // The SDK timeout ends at the headers; this idle timer covers a stream
    // that stalls after its first chunks, so partial text is never stored as a reply.
    const call = linkAbort(signal);
    let idleTimeout: Error | undefined;
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        idleTimeout = new OpenAI.APIConnectionTimeoutError({ message: 'stream idle timeout' });
        call.abort(idleTimeout);
      }, this.role.timeoutMs);
    };
    let emitted = false;
    let content = '';
    let finishReason: string | null = null;
    let usage: ModelUsage | null = null;
    let model = request.model ?? this.model;
    const calls = new Map<number, ToolCall>();
    try {
      arm();
      const body = {
        ...this.params(request),
        stream: true as const,
        stream_options: { include_usage: true },
      };
      onRequestSent?.(body);
      const stream = await this.client.chat.completions.create(body, { signal: call.signal });
      for await (const chunk of stream as AsyncIterable<ChatCompletionChunk>) {
        arm();
        model = chunk.model || model;
        if (chunk.usage) usage = toUsage(chunk.usage);
        const choice = chunk.choices[0];
        if (!choice) continue;
        const delta = choice.delta;
        if (delta.content) {
          content += delta.content;
          emitted = true;
          onDelta(delta.content);
        }
        for (const part of delta.tool_calls ?? []) {
          const call = calls.get(part.index) ?? {
            id: '',
            type: 'function' as const,
            function: { name: '', arguments: '' },
          };
          if (part.id) call.id = part.id;
          if (part.function?.name) call.function.name += part.function.name;
          if (part.function?.arguments) call.function.arguments += part.function.arguments;
          calls.set(part.index, call);
        }
        if (choice.finish_reason) finishReason = choice.finish_reason;
      }
    } catch (err) {
      if (idleTimeout && !signal?.aborted) {
        throw emitted ? new EmittedError(idleTimeout) : idleTimeout;
      }
      // The SDK wraps request failures in APIError; anything else broke the
      // body mid-stream (undici's "terminated" on a reset socket).
      const failure =
        err instanceof OpenAI.APIError || err instanceof CairnError
          ? err
          : new StreamInterruptedError(
              'The connection to the model broke in the middle of the reply. Try again.',
              { cause: err },
            );
      throw emitted ? new EmittedError(failure) : failure;
    } finally {
      clearTimeout(timer);
      call.dispose();
    }
    // The SDK ends an aborted stream quietly, as if it had finished: a stall
    // (our idle timer) must still fail as a timeout.
    if (signal?.aborted) throw signal.reason;
    if (idleTimeout) throw emitted ? new EmittedError(idleTimeout) : idleTimeout;
    if (finishReason === null) {
      // A clean end of stream without a finish_reason is a cut connection,
      // not an answer (a missing [DONE] alone, with a finish_reason, is fine).
      const incomplete = new StreamInterruptedError(
        'The model stream ended before the reply was complete (no finish_reason). Try again.',
      );
      throw emitted ? new EmittedError(incomplete) : incomplete;
    }
    const message: ChatMessage = {
      role: 'assistant',
      content: content === '' && calls.size > 0 ? null : content,
    };
    if (calls.size > 0)
      message.tool_calls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => c);
    return { message, finishReason, usage, model };
  }
}
