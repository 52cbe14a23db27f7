/**
 * The `embed` role as the rest of Cairn calls it: an EmbeddingClient whose
 * every call is on the record (role `embed`, priced by the role's pricing,
 * written with the session's other calls), counted in the metrics, and
 * charged to the session owner's daily tokens, like any model call.
 */
import type { EmbedRoleSettings } from '../config/settings.js';
import { CairnError } from '../errors.js';
import type { Embedded, EmbeddingClient } from '../llm/embedding-client.js';
import type { CallRecorder } from '../records/call-recorder.js';
import type { CairnMetrics } from '../metrics/metrics.js';
import type { VectorStore } from '../store/store.js';

export interface EmbedderDeps {
  client: EmbeddingClient;
  role: EmbedRoleSettings;
  recorder: Pick<CallRecorder, 'noteEmbedding'>;
  metrics?: Pick<CairnMetrics, 'embeddingCall'>;
  /** Charges the tokens of a call that writes no vector (a query) to the session's owner key. */
  store: Pick<VectorStore, 'saveVectors'>;
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
   * Embeds `texts` for `sessionId`. The call is recorded whether it succeeds
   * or fails; `charge: true` (a query) charges its tokens now, otherwise the
   * caller charges them with the vectors it writes.
   */
  async embed(
    sessionId: string,
    texts: readonly string[],
    options: { signal?: AbortSignal; charge?: boolean } = {},
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
      const embedded = await client.embed(texts, options.signal ? { signal: options.signal } : {});
      const latencyMs = performance.now() - started;
      const cost = recorder.noteEmbedding({
        ...base,
        latencyMs,
        request: embedded.request,
        tokens: embedded.tokens,
        error: null,
      });
      metrics?.embeddingCall('ok', embedded.tokens, cost, latencyMs / 1000);
      if (options.charge)
        await this.deps.store.saveVectors([], [{ sessionId, tokens: embedded.tokens }]);
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
