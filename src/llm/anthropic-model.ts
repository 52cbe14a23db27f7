/**
 * `ModelClient` for the Anthropic Messages API, through the official
 * `@anthropic-ai/sdk` (its own retries off; the shared retry layer decides).
 * The same rules as the OpenAI path, in Anthropic's terms: 429 honours
 * `retry-after`, 529 (overloaded) and 5xx are retried, a stream `error` event
 * or a stream that ends before `message_stop` is never an answer, a reply cut
 * at `max_tokens` is reported as `length` so no cut tool call runs. Prompt
 * caching: the request carries cache breakpoints (see anthropic-wire.ts) and
 * the usage reports the tokens read from and written to the cache.
 */
import Anthropic from '@anthropic-ai/sdk';
import type {
  Message,
  MessageCreateParamsBase,
  RawMessageStreamEvent,
} from '@anthropic-ai/sdk/resources/messages';
import { CairnError } from '../errors.js';
import { DEFAULT_MAX_OUTPUT_TOKENS, type ModelRoleSettings } from '../config/settings.js';
import type { ChatMessage, ToolCall } from './messages.js';
import type {
  ModelCallOptions,
  ModelClient,
  ModelRequest,
  ModelResponse,
  ModelUsage,
} from './model-client.js';
import { isContextOverflowText } from './openai-model.js';
import {
  abortableSleep,
  callWithRetries,
  EmittedError,
  retryAfterMs,
  StreamInterruptedError,
  type ClassifiedFailure,
  type ModelLogger,
} from './retry-policy.js';
import { toAnthropicRequest, type CacheHints } from './anthropic-wire.js';

export interface AnthropicModelOptions {
  role: ModelRoleSettings;
  logger?: ModelLogger;
  /** Injected in tests to avoid real waiting; defaults to a timer. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  /** Recognises the summary message, whose end is a cache breakpoint. */
  cacheHints?: CacheHints;
}

/** The Messages API accepts temperatures 0–1 (OpenAI's go to 2). */
const MAX_TEMPERATURE = 1;

/** Anthropic's stop reasons in the chat-completions vocabulary the loop reads. */
export function finishReasonOf(stopReason: string | null): string {
  switch (stopReason) {
    case 'tool_use':
      return 'tool_calls';
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop';
  }
}

interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
}

/** Anthropic counts uncached input apart; `prompt_tokens` is every input token. */
export function usageOf(usage: AnthropicUsage): ModelUsage {
  const read = usage.cache_read_input_tokens ?? 0;
  const written = usage.cache_creation_input_tokens ?? 0;
  return {
    prompt_tokens: (usage.input_tokens ?? 0) + read + written,
    completion_tokens: usage.output_tokens ?? 0,
    cache_read_tokens: read,
    cache_write_tokens: written,
  };
}

/** Everything the upstream error may say, for pattern checks; never sent to clients. */
type ApiError = InstanceType<typeof Anthropic.APIError> & {
  status: number | undefined;
  headers: Headers | undefined;
  error: unknown;
};

function upstreamText(err: ApiError): string {
  let body = '';
  try {
    body = JSON.stringify(err.error ?? '');
  } catch {
    body = '';
  }
  return `${err.type ?? ''} ${err.message} ${body}`;
}

/** The error type of an API error: the body's `error.type`, also for stream `error` events. */
function errorType(err: ApiError): string {
  const body: { error?: { type?: unknown }; type?: unknown } | undefined =
    typeof err.error === 'object' && err.error !== null ? err.error : undefined;
  const type: unknown = err.type ?? body?.error?.type ?? body?.type;
  return typeof type === 'string' ? type : '';
}

function classify(err: unknown, role: ModelRoleSettings): ClassifiedFailure {
  if (err instanceof StreamInterruptedError) {
    return { error: new CairnError('LLM_ERROR', err.message, { cause: err }), retryable: true };
  }
  if (err instanceof Anthropic.APIConnectionTimeoutError) {
    return {
      error: new CairnError(
        'LLM_TIMEOUT',
        `The model at ${role.baseURL} did not answer within ${role.timeoutMs} ms. Try again, or raise the role's timeoutMs.`,
        { cause: err },
      ),
      retryable: true,
    };
  }
  if (err instanceof Anthropic.APIConnectionError) {
    return {
      error: new CairnError(
        'LLM_ERROR',
        `Could not reach the model at ${role.baseURL}. Check the role's baseURL and that the server is reachable.`,
        { cause: err },
      ),
      retryable: true,
    };
  }
  if (err instanceof Anthropic.APIError) {
    const apiError = err as ApiError;
    const status = apiError.status;
    const type = errorType(apiError);
    const text = upstreamText(apiError);
    if ((status === 400 || status === 413 || status === undefined) && isContextOverflowText(text)) {
      return {
        error: new CairnError(
          'CONTEXT_OVERFLOW',
          "The conversation no longer fits in the model's context window. Compact the session (POST /sessions/:id/compact) or reset it.",
          { cause: err },
        ),
        retryable: false,
      };
    }
    if (status === 402 || type === 'billing_error' || /credit balance/i.test(text)) {
      return {
        error: new CairnError(
          'LLM_ERROR',
          'Anthropic reports a billing problem (the credit balance is too low or payment is required). Check the Anthropic account.',
          { cause: err },
        ),
        retryable: false,
      };
    }
    const overloaded = status === 529 || type === 'overloaded_error';
    // A stream `error` event has no status: its type says whether a retry may help.
    const retryable =
      overloaded ||
      (status === undefined
        ? type === 'api_error' || type === 'rate_limit_error' || type === 'timeout_error'
        : status === 408 || status === 409 || status === 429 || status >= 500);
    const delayMs = retryAfterMs(apiError.headers);
    const hint =
      status === 401 || status === 403
        ? " Check the API key (ANTHROPIC_API_KEY or the role's apiKeyEnv)."
        : status === 404
          ? ' Check the model name.'
          : status === 429
            ? ' Anthropic is rate limiting; try again later.'
            : overloaded
              ? ' Anthropic is overloaded; try again later.'
              : '';
    const what = status === undefined ? `a stream error (${type || 'unknown'})` : `HTTP ${status}`;
    return {
      error: new CairnError(
        'LLM_ERROR',
        `The model provider returned ${what}${type && status !== undefined ? `, ${type}` : ''}.${hint}`,
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

function toResponse(message: Message): ModelResponse {
  let text = '';
  const calls: ToolCall[] = [];
  for (const block of message.content) {
    if (block.type === 'text') text += block.text;
    else if (block.type === 'tool_use')
      calls.push({
        id: block.id,
        type: 'function',
        function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) },
      });
  }
  const reply: ChatMessage = {
    role: 'assistant',
    content: text === '' && calls.length > 0 ? null : text,
  };
  if (calls.length > 0) reply.tool_calls = calls;
  return {
    message: reply,
    finishReason: finishReasonOf(message.stop_reason),
    usage: usageOf(message.usage),
    model: message.model,
  };
}

export class AnthropicModel implements ModelClient {
  readonly model: string;
  readonly contextWindow: number;
  private readonly client: Anthropic;
  private readonly role: ModelRoleSettings;
  private readonly logger: ModelLogger | undefined;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;
  private readonly cacheHints: CacheHints;

  constructor(options: AnthropicModelOptions) {
    this.role = options.role;
    this.model = options.role.model;
    this.contextWindow = options.role.contextWindow;
    this.logger = options.logger;
    this.sleep = options.sleep ?? abortableSleep;
    this.cacheHints = options.cacheHints ?? {};
    this.client = new Anthropic({
      // A compatible proxy may take no key; the SDK insists on one.
      apiKey: options.role.apiKey ?? 'not-needed',
      baseURL: options.role.baseURL ?? undefined,
      timeout: options.role.timeoutMs,
      maxRetries: 0,
    });
  }

  complete(request: ModelRequest, options: ModelCallOptions = {}): Promise<ModelResponse> {
    return callWithRetries({
      attempts: this.role.maxRetries + 1,
      attempt: () =>
        options.onDelta
          ? this.streamOnce(request, options.onDelta, options.signal)
          : this.completeOnce(request, options.signal),
      classify: (err) => classify(err, this.role),
      sleep: this.sleep,
      signal: options.signal,
      logger: this.logger,
    });
  }

  /** The request body as sent (exported for the wire property test through `toAnthropicRequest`). */
  private params(request: ModelRequest): MessageCreateParamsBase {
    const wire = toAnthropicRequest(request.messages, request.tools ?? [], this.cacheHints);
    return {
      model: request.model ?? this.model,
      max_tokens: request.maxTokens ?? this.role.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS,
      messages: wire.messages,
      ...(wire.system.length > 0 ? { system: wire.system } : {}),
      ...(wire.tools ? { tools: wire.tools } : {}),
      ...(request.temperature !== undefined
        ? { temperature: Math.min(MAX_TEMPERATURE, request.temperature) }
        : {}),
    };
  }

  private async completeOnce(request: ModelRequest, signal?: AbortSignal): Promise<ModelResponse> {
    // The SDK's timeout ends at the headers; this deadline bounds the whole
    // call, so a body that stalls after them cannot hold the turn.
    const deadline = new AbortController();
    const timer = setTimeout(
      () =>
        deadline.abort(
          new Anthropic.APIConnectionTimeoutError({ message: 'model call timed out' }),
        ),
      this.role.timeoutMs,
    );
    try {
      const message = await this.client.messages.create(
        { ...this.params(request), stream: false },
        { signal: signal ? AbortSignal.any([signal, deadline.signal]) : deadline.signal },
      );
      return toResponse(message);
    } catch (err) {
      if (deadline.signal.aborted && !signal?.aborted) throw deadline.signal.reason;
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private async streamOnce(
    request: ModelRequest,
    onDelta: (text: string) => void,
    signal?: AbortSignal,
  ): Promise<ModelResponse> {
    // The SDK timeout ends at the headers; this idle timer covers a stream
    // that stalls after its first events.
    const idle = new AbortController();
    const combined = signal ? AbortSignal.any([signal, idle.signal]) : idle.signal;
    let timer: NodeJS.Timeout | undefined;
    const arm = (): void => {
      clearTimeout(timer);
      timer = setTimeout(
        () =>
          idle.abort(new Anthropic.APIConnectionTimeoutError({ message: 'stream idle timeout' })),
        this.role.timeoutMs,
      );
    };
    const reply = new StreamedReply(request.model ?? this.model);
    try {
      arm();
      const stream = await this.client.messages.create(
        { ...this.params(request), stream: true },
        { signal: combined },
      );
      for await (const event of stream as AsyncIterable<RawMessageStreamEvent>) {
        arm();
        const text = reply.apply(event);
        if (text) onDelta(text);
      }
    } catch (err) {
      if (idle.signal.aborted && !signal?.aborted) {
        const timeout = idle.signal.reason as Error;
        throw reply.emitted ? new EmittedError(timeout) : timeout;
      }
      // The SDK raises APIError for HTTP errors and stream `error` events;
      // anything else broke the body mid-stream (a reset socket).
      const failure =
        err instanceof Anthropic.APIError || err instanceof CairnError
          ? err
          : new StreamInterruptedError(
              'The connection to the model broke in the middle of the reply. Try again.',
              { cause: err },
            );
      throw reply.emitted ? new EmittedError(failure) : failure;
    } finally {
      clearTimeout(timer);
    }
    if (signal?.aborted) throw signal.reason;
    if (idle.signal.aborted) {
      const timeout = idle.signal.reason as Error;
      throw reply.emitted ? new EmittedError(timeout) : timeout;
    }
    if (!reply.complete) {
      // A clean end of stream before message_stop is a cut connection, not an answer.
      const incomplete = new StreamInterruptedError(
        'The model stream ended before the reply was complete (no message_stop). Try again.',
      );
      throw reply.emitted ? new EmittedError(incomplete) : incomplete;
    }
    return reply.response();
  }
}

/** A reply assembled from Messages API stream events. */
class StreamedReply {
  emitted = false;
  complete = false;
  private text = '';
  private readonly calls = new Map<number, ToolCall & { started: string }>();
  private stopReason: string | null = null;
  private usage: AnthropicUsage = {};

  constructor(private model: string) {}

  /** Folds one event in; returns the text it adds, if any. */
  apply(event: RawMessageStreamEvent): string | undefined {
    switch (event.type) {
      case 'message_start':
        this.model = event.message.model || this.model;
        this.usage = { ...event.message.usage };
        return undefined;
      case 'content_block_start':
        if (event.content_block.type === 'tool_use')
          this.calls.set(event.index, {
            id: event.content_block.id,
            type: 'function',
            function: { name: event.content_block.name, arguments: '' },
            started: JSON.stringify(event.content_block.input ?? {}),
          });
        else if (event.content_block.type === 'text' && event.content_block.text)
          return this.addText(event.content_block.text);
        return undefined;
      case 'content_block_delta':
        if (event.delta.type === 'text_delta') return this.addText(event.delta.text);
        if (event.delta.type === 'input_json_delta') {
          const call = this.calls.get(event.index);
          if (call) call.function.arguments += event.delta.partial_json;
        }
        return undefined;
      case 'message_delta':
        this.stopReason = event.delta.stop_reason ?? this.stopReason;
        // Cumulative counts: what the delta states replaces what message_start said.
        for (const [key, value] of Object.entries(event.usage))
          if (typeof value === 'number') (this.usage as Record<string, number>)[key] = value;
        return undefined;
      case 'message_stop':
        this.complete = true;
        return undefined;
      default:
        return undefined;
    }
  }

  private addText(text: string): string {
    this.text += text;
    this.emitted = true;
    return text;
  }

  response(): ModelResponse {
    const calls = [...this.calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, { started, ...call }]) => ({
        ...call,
        function: {
          ...call.function,
          arguments: call.function.arguments === '' ? started : call.function.arguments,
        },
      }));
    const message: ChatMessage = {
      role: 'assistant',
      content: this.text === '' && calls.length > 0 ? null : this.text,
    };
    if (calls.length > 0) message.tool_calls = calls;
    return {
      message,
      finishReason: finishReasonOf(this.stopReason),
      usage: usageOf(this.usage),
      model: this.model,
    };
  }
}
