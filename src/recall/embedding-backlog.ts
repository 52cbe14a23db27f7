/**
 * Embeds stored messages in the background, off every turn: it walks the
 * messages that have no vector of the role's model and dimensions in row-id
 * order, a batch at a time (one embedding call per session in the batch),
 * and writes the vectors with the tokens they cost. New messages, imports
 * and forks without vectors are caught up the same way, since their rows
 * come after the walk's cursor; a change of model or dimensions makes every
 * vector stale, and the first walk after the start re-embeds them all. When
 * the provider fails the walk waits (doubling up to MAX_RETRY_MS) and resumes
 * where it stopped; nothing is skipped. Every RESCAN_MS while idle it walks
 * again from the start, for rows that committed out of id order.
 */
import type { UnembeddedMessage, VectorStore } from '../store/store.js';
import type { Embedder } from './embedder.js';

/** Messages embedded per batch. */
export const EMBED_BATCH = 64;
/** A message is clipped to this many characters before it is embedded (a long tool output says enough by then). */
export const EMBED_INPUT_CHARS = 2_000;
/** Wait between looks for new messages once caught up. */
export const IDLE_POLL_MS = 1_000;
/** First wait after a failure; it doubles up to MAX_RETRY_MS. */
export const FIRST_RETRY_MS = 2_000;
export const MAX_RETRY_MS = 60_000;
/** While idle, the walk starts over this often. */
export const RESCAN_MS = 10 * 60_000;

export interface EmbeddingBacklogDeps {
  store: Pick<VectorStore, 'unembeddedMessages' | 'saveVectors'>;
  embedder: Pick<Embedder, 'embed' | 'model' | 'dimensions'>;
  warn: (details: Record<string, unknown>, message: string) => void;
  batchSize?: number;
  idlePollMs?: number;
}

export class EmbeddingBacklog {
  private cursor = 0;
  /** Learned from the first answer when the role does not set dimensions. */
  private dimensions: number | null;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  private retryMs = FIRST_RETRY_MS;
  private failing = false;
  private lastRescan = Date.now();

  constructor(private readonly deps: EmbeddingBacklogDeps) {
    this.dimensions = deps.embedder.dimensions;
  }

  /** Starts the background walk. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Stops the walk and waits for a batch in flight. */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /**
   * Embeds one batch of the backlog; returns how many messages it embedded
   * (0: nothing left after the cursor). Throws what the provider threw.
   */
  async embedBatch(): Promise<number> {
    const pending = await this.deps.store.unembeddedMessages(
      this.deps.embedder.model,
      this.dimensions ?? -1,
      this.cursor,
      this.deps.batchSize ?? EMBED_BATCH,
    );
    if (pending.length === 0) return 0;
    const bySession = new Map<string, UnembeddedMessage[]>();
    for (const message of pending) {
      const list = bySession.get(message.session_id) ?? [];
      list.push(message);
      bySession.set(message.session_id, list);
    }
    for (const [sessionId, messages] of bySession) {
      const embedded = await this.deps.embedder.embed(
        sessionId,
        messages.map((message) => message.content.slice(0, EMBED_INPUT_CHARS)),
      );
      this.dimensions ??= embedded.vectors[0]?.length ?? null;
      await this.deps.store.saveVectors(
        messages.map((message, i) => ({
          messageId: message.id,
          model: this.deps.embedder.model,
          dimensions: embedded.vectors[i]!.length,
          vector: embedded.vectors[i]!,
        })),
        [{ sessionId, tokens: embedded.tokens }],
      );
    }
    // Only once every session of the batch is written: a failure retries the whole batch.
    this.cursor = pending[pending.length - 1]!.id;
    return pending.length;
  }

  /** Embeds batches until nothing is left; returns how many messages it embedded. */
  async catchUp(): Promise<number> {
    let total = 0;
    for (;;) {
      const done = await this.embedBatch();
      if (done === 0) return total;
      total += done;
    }
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.tick().finally(() => (this.running = undefined));
    }, delayMs);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    try {
      const done = await this.embedBatch();
      if (this.failing) {
        this.failing = false;
        this.deps.warn({ model: this.deps.embedder.model }, 'embedding backlog resumed');
      }
      this.retryMs = FIRST_RETRY_MS;
      if (done > 0) return this.schedule(0);
      if (Date.now() - this.lastRescan >= RESCAN_MS) {
        this.lastRescan = Date.now();
        this.cursor = 0;
      }
      this.schedule(this.deps.idlePollMs ?? IDLE_POLL_MS);
    } catch (err) {
      if (!this.failing) {
        this.failing = true;
        this.deps.warn(
          {
            model: this.deps.embedder.model,
            error: err instanceof Error ? err.message : String(err),
          },
          'embedding backlog paused: the provider failed; it retries and resumes where it stopped',
        );
      }
      const wait = this.retryMs;
      this.retryMs = Math.min(MAX_RETRY_MS, this.retryMs * 2);
      this.schedule(wait);
    }
  }
}
