/**
 * The `embed` role as the rest of Cairn calls it: an EmbeddingClient whose
 * every call is on the record (role `embed`, priced by the role's pricing,
 * written with the session's other calls), counted in the metrics, and held
 * against the session owner's daily tokens like any model call: the input's
 * estimate is reserved before the call (an embedding has no output) and the
 * real tokens are charged after. A key whose day cannot cover the input is
 * refused with BUDGET_EXCEEDED before the provider is asked anything.
 */
import type { EmbedRoleSettings } from '../config/settings.js';
import { CairnError } from '../errors.js';
import type { Embedded, EmbeddingClient } from '../llm/embedding-client.js';
import { estimateTextTokens } from '../llm/tokens.js';
import type { CallRecorder } from '../records/call-recorder.js';
import type { CairnMetrics } from '../metrics/metrics.js';
import { UNLIMITED_BUDGET, type Budget, type Reservation } from '../runtime/budget.js';
import type { VectorStore } from '../store/store.js';

export interface EmbedderDeps {
  client: EmbeddingClient;
  role: EmbedRoleSettings;
  recorder: Pick<CallRecorder, 'noteEmbedding'>;
  metrics?: Pick<CairnMetrics, 'embeddingCall'>;
  /** Charges the tokens of a call that writes no vector (a query) to the session's owner key. */
  store: Pick<VectorStore, 'saveVectors'>;
  /** The owner keys' token budgets; every call reserves its input here first. */
  budget?: Budget;
}

/** Whose call this is, and what becomes of its tokens. */
export interface EmbedOptions {
  /** The session's owner key, whose day the call is held against (null: the admin's, unlimited). */
  ownerKey: string | null;
  signal?: AbortSignal;
  /**
   * Writes what the call made and charges its tokens in the same write (the
   * backlog's vectors); the reservation ends after it. Without it (a query)
   * the tokens are charged to the owner key at once.
   */
  write?: (embedded: Embedded) => Promise<void>;
}

/** The tokens an embedding call claims: Cairn's estimate of its input (no output). */
export function embeddingClaim(texts: readonly string[]): number {
  return texts.reduce((sum, text) => sum + estimateTextTokens(text), 0);
}

export class Embedder {
  constructor(private readonly deps: EmbedderDeps) {}

  /** The model name stored with every vector. */
  get model(): string {
    return this.deps.client.model;
  }

  /** The dimensions asked of the provider, or null when the model's own are used. */
  get dimensions(): number | null {
    return this.deps.role.dimensions;
  }

  /**
   * Embeds `texts` for `sessionId`, reserved on the owner key's day first
   * (throws BUDGET_EXCEEDED, untried and unrecorded, when it cannot be
   * covered). The call is recorded whether it succeeds or fails; its tokens
   * are charged by `options.write` or, without one, at once.
   */
  async embed(
    sessionId: string,
    texts: readonly string[],
    options: EmbedOptions,
  ): Promise<Embedded> {
    const budget = this.deps.budget ?? UNLIMITED_BUDGET;
    const reservation = await budget.reserve(options.ownerKey, embeddingClaim(texts));
    let embedded: Embedded;
    try {
      embedded = await this.call(sessionId, texts, options.signal);
    } catch (err) {
      await reservation?.release();
      throw err;
    }
    await this.charge(sessionId, embedded, reservation, options.write);
    return embedded;
  }

  /**
   * Charges a call's real tokens and ends its reservation. A query with a
   * reservation is charged by it in one step; a write charges with what it
   * writes, and the claim (settled up if the call cost more) is released
   * after, so the key's day never counts less than the call spent.
   */
  private async charge(
    sessionId: string,
    embedded: Embedded,
    reservation: Reservation | undefined,
    write: EmbedOptions['write'],
  ): Promise<void> {
    if (!write) {
      if (reservation) await reservation.charge(embedded.tokens);
      else await this.deps.store.saveVectors([], [{ sessionId, tokens: embedded.tokens }]);
      return;
    }
    try {
      if (reservation && embedded.tokens > reservation.tokens)
        await reservation.settle(embedded.tokens);
      await write(embedded);
    } finally {
      await reservation?.release();
    }
  }

  /** The provider's call, on the record and in the metrics. */
  private async call(
    sessionId: string,
    texts: readonly string[],
    signal: AbortSignal | undefined,
  ): Promise<Embedded> {
    const { client, role, recorder, metrics } = this.deps;
    const createdAt = new Date().toISOString();
    const started = performance.now();
    const base = {
      sessionId,
      provider: role.provider,
      model: client.model,
      createdAt,
      pricing: role.pricing,
    };
    try {
      const embedded = await client.embed(texts, signal ? { signal } : {});
      const latencyMs = performance.now() - started;
      const cost = recorder.noteEmbedding({
        ...base,
        latencyMs,
        request: embedded.request,
        tokens: embedded.tokens,
        error: null,
      });
      metrics?.embeddingCall('ok', embedded.tokens, cost, latencyMs / 1000);
      return embedded;
    } catch (err) {
      const latencyMs = performance.now() - started;
      const error =
        err instanceof CairnError
          ? { code: err.code, message: err.message }
          : { code: 'LLM_ERROR', message: err instanceof Error ? err.message : String(err) };
      recorder.noteEmbedding({
        ...base,
        latencyMs,
        request: { model: client.model, input: [...texts] },
        tokens: null,
        error,
      });
      metrics?.embeddingCall('error', 0, null, latencyMs / 1000);
      throw err;
    }
  }
}
