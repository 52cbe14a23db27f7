/**
 * The model seam. The runtime and compaction talk to `ModelClient` only; the
 * openai adapter and the built-in offline model implement it. Implementations
 * throw `CairnError` with `LLM_ERROR`, `LLM_TIMEOUT` or `CONTEXT_OVERFLOW`.
 */
import type { ChatMessage, ToolSpec } from './messages.js';

export interface ModelRequest {
  messages: ChatMessage[];
  tools?: ToolSpec[];
  temperature?: number;
  /** Upper bound on the reply's tokens (the summariser sets it from maxSummaryChars). */
  maxTokens?: number;
  /** Overrides the role's model name (an agent's `model`). */
  model?: string;
  /** What the call is for; the offline model answers summaries extractively. Never sent. */
  purpose: 'chat' | 'summary' | 'title';
  /**
   * Groups calls that share a prefix so the provider can serve it from its
   * prompt cache (the session id): OpenAI's `prompt_cache_key`.
   */
  promptCacheKey?: string;
}

export interface ModelCallOptions {
  signal?: AbortSignal;
  /** When set, the reply is streamed and each text fragment is passed here. */
  onDelta?: (text: string) => void;
}

export interface ModelUsage {
  /** Every input token of the call, cached ones included. */
  prompt_tokens: number;
  completion_tokens: number;
  /** Of `prompt_tokens`, those served from the provider's prompt cache (absent: not reported). */
  cache_read_tokens?: number;
  /** Of `prompt_tokens`, those written to the provider's prompt cache (Anthropic reports them). */
  cache_write_tokens?: number;
}

/** A model of a fallback chain that did not answer: it failed for good, or its circuit was open. */
export interface FallbackHop {
  provider: string;
  model: string;
  baseURL: string | null;
  /** True when it was not tried (its circuit breaker was open). */
  skipped: boolean;
  /** Why it did not answer: the error's message, or "circuit open". */
  reason: string;
}

export interface ModelResponse {
  /** The assistant message (content and/or tool_calls). */
  message: ChatMessage;
  finishReason: string;
  usage: ModelUsage | null;
  /** The model that answered. */
  model: string;
  /** The models of the role's fallback chain that were passed over first (absent: none). */
  fallbackHops?: FallbackHop[];
}

export interface ModelClient {
  /** The role's default model name, e.g. `gpt-4o-mini` or `offline`. */
  readonly model: string;
  /** Context window of the role's model, in tokens. */
  readonly contextWindow: number;
  complete(request: ModelRequest, options?: ModelCallOptions): Promise<ModelResponse>;
}
