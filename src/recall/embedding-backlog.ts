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
 *
 * Each session's call is reserved on its owner key's day first. A key whose
 * day cannot cover it is deferred: its messages are passed over (the walk goes
 * on with other keys' messages, so one spent key never holds up the rest),
 * and after BUDGET_RETRY_MS the walk goes back to the first message it passed
 * over and asks again (a raised limit, a new day, or reservations that ended).
 */
import { CairnError } from '../errors.js';
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
/** A key whose budget refused a batch is asked again after this long. */
export const BUDGET_RETRY_MS = 60_000;

/** A key the walk passes over until `until`, and the first of its messages it passed. */
interface Deferred {
  until: number;
  fromId: number;
}

export interface EmbeddingBacklogDeps {
  store: Pick<VectorStore, 'unembeddedMessages' | 'saveVectors'>;
  embedder: Pick<Embedder, 'embed' | 'model' | 'dimensions'>;
  warn: (details: Record<string, unknown>, message: string) => void;
  batchSize?: number;
  idlePollMs?: number;
  now?: () => number;
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
  /** Keys out of budget, by key id. */
  private readonly deferred = new Map<string, Deferred>();

  constructor(private readonly deps: EmbeddingBacklogDeps) {
    this.dimensions = deps.embedder.dimensions;
  }

  /** Starts the background walk. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /**
   * The next batch walks from the start: messages may now hold ids behind the
   * cursor (SQLite reuses the ids of the newest rows once they are deleted).
   */
  rewind(): void {
    this.cursor = 0;
  }

  /** Stops the walk and waits for a batch in flight. */
  async close(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /**
   * Embeds one batch of the backlog; returns how many messages it walked,
   * embedded or passed over because their key is out of budget (0: nothing
   * left after the cursor). Throws what the provider threw.
   */
  async embedBatch(): Promise<number> {
    this.rewindForDueKeys();
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
      const ownerKey = messages[0]!.owner_key;
      if (ownerKey !== null && this.deferred.has(ownerKey)) {
        this.defer(ownerKey, messages[0]!.id);
        continue;
      }
      try {
        await this.embedSession(sessionId, ownerKey, messages);
      } catch (err) {
        if (ownerKey === null || !(err instanceof CairnError) || err.code !== 'BUDGET_EXCEEDED')
          throw err;
        this.defer(ownerKey, messages[0]!.id);
      }
    }
    // Only once every session of the batch is written: a failure retries the whole batch.
    this.cursor = pending[pending.length - 1]!.id;
    return pending.length;
  }

  /** One session's messages in one call, reserved on its owner key; the vectors charge the call. */
  private async embedSession(
    sessionId: string,
    ownerKey: string | null,
    messages: readonly UnembeddedMessage[],
  ): Promise<void> {
    await this.deps.embedder.embed(
      sessionId,
      messages.map((message) => message.content.slice(0, EMBED_INPUT_CHARS)),
      {
        ownerKey,
        write: async (embedded) => {
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
        },
      },
    );
  }

  /** Passes over `keyId`'s messages from `fromId` on until BUDGET_RETRY_MS from the first refusal. */
  private defer(keyId: string, fromId: number): void {
    const known = this.deferred.get(keyId);
    if (known) known.fromId = Math.min(known.fromId, fromId);
    else this.deferred.set(keyId, { until: this.now() + BUDGET_RETRY_MS, fromId });
  }

  /** Walks back to the first message passed over of every key whose wait is over. */
  private rewindForDueKeys(): void {
    const now = this.now();
    for (const [keyId, deferred] of this.deferred) {
      if (deferred.until > now) continue;
      this.deferred.delete(keyId);
      this.cursor = Math.min(this.cursor, deferred.fromId - 1);
    }
  }

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /** Embeds batches until nothing is left; returns how many messages it walked. */
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
