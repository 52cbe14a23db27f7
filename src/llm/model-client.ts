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
  /** Seqs of the compacted messages automatic recall put in `messages`, for the call's record. Never sent. */
  recalledSeqs?: readonly number[];
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
  /** Whose call this is: the call records and traces file it under this. Never sent. */
  scope?: ModelCallScope;
  /** Seqs of compacted messages injected into this request (recall), for the call record. Never sent. */
  recalledSeqs?: readonly number[];
  /**
   * Told the exact body each time the provider sends one (every attempt), as
   * the object it serialises with `JSON.stringify`: the call record stores
   * what the model saw, byte for byte. A provider that never calls it is
   * recorded with Cairn's own request instead.
   */
  onRequestSent?: (body: Readonly<Record<string, unknown>>) => void;
}

/** The session (and turn) a model call serves. */
export interface ModelCallScope {
  sessionId: string;
  /** Seq of the first message the running turn stored; absent outside a turn. */
  turnSeq?: number;
  agentName?: string;
  /** The running turn's (or compaction's) trace span, when tracing is on: the call's span is its child. */
  span?: unknown;
  /** Whether the session's history is compacted now (read at each call). */
  compacted?: () => boolean;
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
  /** What the call cost by its role's pricing; set by the call recorder, null when unpriced. */
  cost?: number | null;
}

export interface ModelClient {
  /** The role's default model name, e.g. `gpt-4o-mini` or `offline`. */
  readonly model: string;
  /** Context window of the role's model, in tokens. */
  readonly contextWindow: number;
  complete(request: ModelRequest, options?: ModelCallOptions): Promise<ModelResponse>;
}

/** A decorator of `inner`: its model and window, read through, with `complete` wrapped. */
export function decorateModel(inner: ModelClient, complete: ModelClient['complete']): ModelClient {
  return {
    get model() {
      return inner.model;
    },
    get contextWindow() {
      return inner.contextWindow;
    },
    complete,
  };
}
