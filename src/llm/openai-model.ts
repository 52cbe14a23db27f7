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
import type { ChatMessage, ToolCall } from './messages.js';
import { httpFetch } from './http-fetch.js';
import { bridgeToolToUser } from './wire-profile.js';
import { streamWithIdleTimer, withDeadline } from './call-deadline.js';
import * as retryPolicy from './retry-policy.js';
import { RetryingModel, type RetryingModelOptions } from './retrying-model.js';
import type { ModelCallOptions, ModelRequest, ModelResponse, ModelUsage } from './model-client.js';

export { MAX_RETRY_AFTER_MS, retryAfterMs, type ModelLogger } from './retry-policy.js';

export interface OpenAIModelOptions extends RetryingModelOptions {
  /** The SDK's fetch; httpFetch unless given. */
  fetch?: typeof fetch;
}

type APIErrorLike = {
  code?: string | null;
  type?: string;
  message: string;
  error?: unknown;
  headers?: Headers;
  status?: number;
};

function classifyApiError(err: APIErrorLike): retryPolicy.ClassifiedFailure {
  const status = err.status;
  const text = retryPolicy.upstreamText(err, err.code, err.type);
  const code = err.code ? `, code ${err.code}` : '';
  if (
    (status === 400 || status === 413 || status === 422 || status === undefined) &&
    retryPolicy.isContextOverflowText(text)
  ) {
    return retryPolicy.contextOverflowFailure(err);
  }
  if (status === 429 && /insufficient_quota|billing|quota/i.test(text)) {
    return retryPolicy.failure(
      'LLM_ERROR',
      'The model provider reports the account is out of quota or has a billing problem (HTTP 429, insufficient_quota). Check the provider account.',
      err,
      false,
    );
  }
  const retryable =
    status === undefined || status === 408 || status === 409 || status === 429 || status >= 500;
  const hint = retryPolicy.statusHint(status, {
    auth: " Check the API key (OPENAI_API_KEY or the role's apiKeyEnv).",
    notFound: ' Check the model name and OPENAI_BASE_URL.',
    rateLimited: ' The provider is rate limiting; try again later.',
  });
  return retryPolicy.httpFailure(
    err,
    `The model provider returned HTTP ${status ?? 'error'}${code}.${hint}`,
    retryable,
    err.headers,
  );
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

export class OpenAIModel extends RetryingModel<InstanceType<typeof OpenAI.APIError>> {
  private readonly client: OpenAI;

  constructor(options: OpenAIModelOptions) {
    super(options);
    this.client = new OpenAI({
      // Local servers (Ollama, llama.cpp) accept any key; the SDK insists on one.
      apiKey: options.role.apiKey ?? 'not-needed',
      baseURL: options.role.baseURL ?? undefined,
      timeout: options.role.timeoutMs,
      maxRetries: 0,
      fetch: options.fetch ?? httpFetch,
    });
  }

  protected failures(): retryPolicy.ProviderFailures<InstanceType<typeof OpenAI.APIError>> {
    return retryPolicy.sdkFailures(OpenAI, {
      timeoutMessage: `The model at ${this.role.baseURL} did not answer within ${this.role.timeoutMs} ms. Try again, or raise models.main.timeoutMs.`,
      connectionMessage: `Could not reach the model at ${this.role.baseURL}. Check OPENAI_BASE_URL and that the model server is running.`,
      classifyApiError,
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

  protected async completeOnce(
    request: ModelRequest,
    { signal, onRequestSent }: ModelCallOptions,
  ): Promise<ModelResponse> {
    const body = { ...this.params(request), stream: false as const };
    const completion: ChatCompletion = await withDeadline(
      signal,
      this.role.timeoutMs,
      () => new OpenAI.APIConnectionTimeoutError({ message: 'model call timed out' }),
      (callSignal) => {
        onRequestSent?.(body);
        return this.client.chat.completions.create(body, { signal: callSignal });
      },
    );
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

  protected async streamOnce(
    request: ModelRequest,
    onDelta: (text: string) => void,
    { signal, onRequestSent }: ModelCallOptions,
  ): Promise<ModelResponse> {
    let content = '';
    let usage: ModelUsage | null = null;
    let model = request.model ?? this.model;
    const calls = new Map<number, ToolCall>();
    // Complete once a chunk carried a finish_reason.
    const progress = { emitted: false, complete: false, finishReason: '' };
    await streamWithIdleTimer(
      {
        signal,
        idleMs: this.role.timeoutMs,
        idleTimeout: () => new OpenAI.APIConnectionTimeoutError({ message: 'stream idle timeout' }),
        apiError: OpenAI.APIError,
        // A missing [DONE] alone, with a finish_reason, is fine.
        missing: 'no finish_reason',
        progress,
      },
      async (callSignal, arm) => {
        const body = {
          ...this.params(request),
          stream: true as const,
          stream_options: { include_usage: true },
        };
        onRequestSent?.(body);
        const stream = await this.client.chat.completions.create(body, { signal: callSignal });
        for await (const chunk of stream as AsyncIterable<ChatCompletionChunk>) {
          arm();
          model = chunk.model || model;
          if (chunk.usage) usage = toUsage(chunk.usage);
          const choice = chunk.choices[0];
          if (!choice) continue;
          const delta = choice.delta;
          if (delta.content) {
            content += delta.content;
            progress.emitted = true;
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
          if (choice.finish_reason) {
            progress.finishReason = choice.finish_reason;
            progress.complete = true;
          }
        }
      },
    );
    const message: ChatMessage = {
      role: 'assistant',
      content: content === '' && calls.size > 0 ? null : content,
    };
    if (calls.size > 0)
      message.tool_calls = [...calls.entries()].sort(([a], [b]) => a - b).map(([, c]) => c);
    return { message, finishReason: progress.finishReason, usage, model };
  }
}
