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
import { defaultOutputTokens } from '../config/settings.js';
import type { ChatMessage, ToolCall } from './messages.js';
import type { ModelCallOptions, ModelRequest, ModelResponse, ModelUsage } from './model-client.js';
import { streamWithIdleTimer, withDeadline } from './call-deadline.js';
import * as retryPolicy from './retry-policy.js';
import { RetryingModel, type RetryingModelOptions } from './retrying-model.js';
import { toAnthropicRequest, type CacheHints } from './anthropic-wire.js';
import { httpFetch } from './http-fetch.js';

export interface AnthropicModelOptions extends RetryingModelOptions {
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

type ApiError = InstanceType<typeof Anthropic.APIError> & {
  status: number | undefined;
  headers: Headers | undefined;
  error: unknown;
};

/** The error type of an API error: the body's `error.type`, also for stream `error` events. */
function errorType(err: ApiError): string {
  const body: { error?: { type?: unknown }; type?: unknown } | undefined =
    typeof err.error === 'object' && err.error !== null ? err.error : undefined;
  const type: unknown = err.type ?? body?.error?.type ?? body?.type;
  return typeof type === 'string' ? type : '';
}

function classifyApiError(err: ApiError): retryPolicy.ClassifiedFailure {
  const status = err.status;
  const type = errorType(err);
  const text = retryPolicy.upstreamText(err, err.type);
  if (
    (status === 400 || status === 413 || status === undefined) &&
    retryPolicy.isContextOverflowText(text)
  ) {
    return retryPolicy.contextOverflowFailure(err);
  }
  if (status === 402 || type === 'billing_error' || /credit balance/i.test(text)) {
    return retryPolicy.failure(
      'LLM_ERROR',
      'Anthropic reports a billing problem (the credit balance is too low or payment is required). Check the Anthropic account.',
      err,
      false,
    );
  }
  const overloaded = status === 529 || type === 'overloaded_error';
  // A stream `error` event has no status: its type says whether a retry may help.
  const retryable =
    overloaded ||
    (status === undefined
      ? type === 'api_error' || type === 'rate_limit_error' || type === 'timeout_error'
      : status === 408 || status === 409 || status === 429 || status >= 500);
  const hint = retryPolicy.statusHint(status, {
    auth: " Check the API key (ANTHROPIC_API_KEY or the role's apiKeyEnv).",
    notFound: ' Check the model name.',
    rateLimited: ' Anthropic is rate limiting; try again later.',
    otherwise: overloaded ? ' Anthropic is overloaded; try again later.' : '',
  });
  const what = status === undefined ? `a stream error (${type || 'unknown'})` : `HTTP ${status}`;
  return retryPolicy.httpFailure(
    err,
    `The model provider returned ${what}${type && status !== undefined ? `, ${type}` : ''}.${hint}`,
    retryable,
    err.headers,
  );
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

export class AnthropicModel extends RetryingModel<InstanceType<typeof Anthropic.APIError>> {
  private readonly client: Anthropic;
  private readonly cacheHints: CacheHints;

  constructor(options: AnthropicModelOptions) {
    super(options);
    this.cacheHints = options.cacheHints ?? {};
    this.client = new Anthropic({
      // A compatible proxy may take no key; the SDK insists on one.
      apiKey: options.role.apiKey ?? 'not-needed',
      baseURL: options.role.baseURL ?? undefined,
      timeout: options.role.timeoutMs,
      maxRetries: 0,
      fetch: httpFetch,
    });
  }

  protected failures(): retryPolicy.ProviderFailures<InstanceType<typeof Anthropic.APIError>> {
    return retryPolicy.sdkFailures(Anthropic, {
      timeoutMessage: `The model at ${this.role.baseURL} did not answer within ${this.role.timeoutMs} ms. Try again, or raise the role's timeoutMs.`,
      connectionMessage: `Could not reach the model at ${this.role.baseURL}. Check the role's baseURL and that the server is reachable.`,
      classifyApiError,
    });
  }

  /** The request body as sent (exported for the wire property test through `toAnthropicRequest`). */
  private params(request: ModelRequest): MessageCreateParamsBase {
    const wire = toAnthropicRequest(request.messages, request.tools ?? [], this.cacheHints);
    return {
      model: request.model ?? this.model,
      max_tokens: request.maxTokens ?? defaultOutputTokens(this.role),
      messages: wire.messages,
      ...(wire.system.length > 0 ? { system: wire.system } : {}),
      ...(wire.tools ? { tools: wire.tools } : {}),
      ...(request.temperature !== undefined
        ? { temperature: Math.min(MAX_TEMPERATURE, request.temperature) }
        : {}),
    };
  }

  protected async completeOnce(
    request: ModelRequest,
    { signal }: ModelCallOptions,
  ): Promise<ModelResponse> {
    const message = await withDeadline(
      signal,
      this.role.timeoutMs,
      () => new Anthropic.APIConnectionTimeoutError({ message: 'model call timed out' }),
      (callSignal) =>
        this.client.messages.create(
          { ...this.params(request), stream: false },
          { signal: callSignal },
        ),
    );
    return toResponse(message);
  }

  protected async streamOnce(
    request: ModelRequest,
    onDelta: (text: string) => void,
    { signal }: ModelCallOptions,
  ): Promise<ModelResponse> {
    const reply = new StreamedReply(request.model ?? this.model);
    await streamWithIdleTimer(
      {
        signal,
        idleMs: this.role.timeoutMs,
        idleTimeout: () =>
          new Anthropic.APIConnectionTimeoutError({ message: 'stream idle timeout' }),
        // Also raised for stream `error` events.
        apiError: Anthropic.APIError,
        missing: 'no message_stop',
        progress: reply,
      },
      async (callSignal, arm) => {
        const stream = await this.client.messages.create(
          { ...this.params(request), stream: true },
          { signal: callSignal },
        );
        for await (const event of stream as AsyncIterable<RawMessageStreamEvent>) {
          arm();
          const text = reply.apply(event);
          if (text) onDelta(text);
        }
      },
    );
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
