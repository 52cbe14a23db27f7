/**
 * Limits on server-sent-event streams, so clients that open streams and never
 * read cannot exhaust the server: how many may be open
 * at once (`/events` and streamed chats together; beyond, 503
 * SERVICE_UNAVAILABLE before anything starts), and how many bytes one stream
 * may have queued for a client that does not read before it is dropped.
 */
import { CairnError } from '../errors.js';
import { markReported } from './errors.js';
import type { KeyShares } from './key-shares.js';
import type { Principal } from './principal.js';

/** What a refused client is told to wait before it tries again. */
export const STREAM_RETRY_AFTER_S = 5;

export interface StreamLimits {
  /** Open streams allowed at once, all clients together. */
  readonly maxStreams: number;
  /** Bytes one stream may have waiting for its client; more and the client is dropped. */
  readonly maxBufferedBytes: number;
}

export type GateLogger = (details: Record<string, unknown>, message: string) => void;

export class StreamGate {
  private open = 0;
  /** Refusals since the cap was last reached: a burst is logged once, when it starts. */
  private refusedInBurst = 0;

  constructor(
    readonly limits: StreamLimits,
    private readonly warn: GateLogger = () => undefined,
    /** Each key's share of the streams (limits.maxStreams); none: no per-key share. */
    private readonly shares?: KeyShares,
  ) {}

  /** Streams open right now. */
  get openStreams(): number {
    return this.open;
  }

  /**
   * Takes a slot for a new stream: throws 429 KEY_LIMIT when the principal's
   * key holds its share already, 503 SERVICE_UNAVAILABLE when all are taken.
   * Returns the release function (safe to call more than once).
   */
  acquire(principal?: Principal): () => void {
    const releaseShare =
      principal && this.shares ? this.shares.take(principal, 'maxStreams') : undefined;
    try {
      return this.acquireServerSlot(releaseShare);
    } catch (err) {
      releaseShare?.();
      throw err;
    }
  }

  private acquireServerSlot(releaseShare: (() => void) | undefined): () => void {
    if (this.open >= this.limits.maxStreams) {
      this.refusedInBurst += 1;
      if (this.refusedInBurst === 1)
        this.warn(
          { maxStreams: this.limits.maxStreams },
          'stream cap reached: new streams get 503 until one closes (server.maxStreams)',
        );
      // Logged above, once for the burst: not again as a failed request.
      throw markReported(
        new CairnError(
          'SERVICE_UNAVAILABLE',
          `Too many open event streams (the limit is ${this.limits.maxStreams}, server.maxStreams). Close a stream or retry in ${STREAM_RETRY_AFTER_S} s.`,
          { retryAfterSeconds: STREAM_RETRY_AFTER_S },
        ),
      );
    }
    this.open += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.open -= 1;
      releaseShare?.();
      // Below the cap again: the next refusal starts a new burst.
      this.refusedInBurst = 0;
    };
  }
}
