/**
 * Limits on server-sent-event streams (RELIABILITY 53): how many may be open
 * at once (`/events` and streamed chats together; beyond, 503
 * SERVICE_UNAVAILABLE before anything starts), and how many bytes one stream
 * may have queued for a client that does not read before it is dropped.
 */
import { CairnError } from '../errors.js';

export interface StreamLimits {
  /** Open streams allowed at once, all clients together. */
  readonly maxStreams: number;
  /** Bytes one stream may have waiting for its client; more and the client is dropped. */
  readonly maxBufferedBytes: number;
}

export class StreamGate {
  private open = 0;

  constructor(readonly limits: StreamLimits) {}

  /** Streams open right now. */
  get openStreams(): number {
    return this.open;
  }

  /**
   * Takes a slot for a new stream, or throws 503 SERVICE_UNAVAILABLE when all
   * are taken. Returns the release function (safe to call more than once).
   */
  acquire(): () => void {
    if (this.open >= this.limits.maxStreams) {
      throw new CairnError(
        'SERVICE_UNAVAILABLE',
        `Too many open event streams (the limit is ${this.limits.maxStreams}, server.maxStreams). Close a stream or retry later.`,
      );
    }
    this.open += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.open -= 1;
    };
  }
}
