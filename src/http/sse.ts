/**
 * Server-sent events on a hijacked fastify reply, with a slot from the
 * StreamGate and a bounded buffer: a client that does not read is dropped
 * (connection closed, logged once) once more than `maxBufferedBytes` wait
 * for it, so it can never grow the server's memory.
 */
import type { FastifyReply } from 'fastify';
import { principalOf } from './principal.js';
import type { StreamGate } from './stream-gate.js';

export class SseStream {
  private closed = false;
  private readonly release: () => void;

  /** Takes a stream slot first (before any byte is sent): 429 KEY_LIMIT past the key's share, 503 SERVICE_UNAVAILABLE when none is free. */
  constructor(
    private readonly reply: FastifyReply,
    private readonly gate: StreamGate,
    headers: Readonly<Record<string, string>> = {},
  ) {
    this.release = gate.acquire(principalOf(reply.request));
    reply.hijack();
    reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      ...headers,
    });
    // Send the headers now: a stream with nothing to replay would otherwise
    // leave the client waiting for its headers until the first event.
    reply.raw.flushHeaders();
    reply.raw.on('close', () => {
      this.closed = true;
      this.release();
    });
  }

  get isClosed(): boolean {
    return this.closed || this.reply.raw.destroyed;
  }

  send(event: string, data: unknown, id?: number): void {
    const idLine = id !== undefined ? `id: ${id}\n` : '';
    this.write(`${idLine}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  /** A frame with no id: `data: <json>` (after `event: <type>` when given), as OpenAI streams them. */
  data(data: unknown, event?: string): void {
    const eventLine = event !== undefined ? `event: ${event}\n` : '';
    this.write(`${eventLine}data: ${JSON.stringify(data)}\n\n`);
  }

  /** A raw `data:` line that is not JSON (OpenAI's closing `data: [DONE]`). */
  dataText(text: string): void {
    this.write(`data: ${text}\n\n`);
  }

  /** A frame a protocol's own encoder made, complete with its framing (AG-UI's EventEncoder). */
  encoded(frame: string): void {
    this.write(frame);
  }

  comment(text: string): void {
    this.write(`: ${text}\n\n`);
  }

  /**
   * Resolves once the client has taken what is queued (or the stream
   * closed): a producer that can wait (a replay) waits here instead of
   * filling the buffer.
   */
  async drained(): Promise<void> {
    const raw = this.reply.raw;
    if (this.isClosed || !raw.writableNeedDrain) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        raw.off('drain', done);
        raw.off('close', done);
        resolve();
      };
      raw.on('drain', done);
      raw.on('close', done);
    });
  }

  /** Ends the stream. Its slot is given back on `close`, once the client has what was queued. */
  end(): void {
    if (!this.isClosed) this.reply.raw.end();
    this.closed = true;
  }

  private write(text: string): void {
    if (this.isClosed) return;
    const raw = this.reply.raw;
    const queued = raw.writableLength;
    if (queued > 0 && queued + Buffer.byteLength(text) > this.gate.limits.maxBufferedBytes) {
      // The client stopped reading: drop it rather than queue without bound.
      // (With nothing queued, one event is sent whatever its size.)
      this.reply.log.warn(
        { queuedBytes: queued, limitBytes: this.gate.limits.maxBufferedBytes },
        'event stream dropped: the client is not reading',
      );
      this.closed = true;
      raw.destroy();
      this.release();
      return;
    }
    raw.write(text);
  }
}

/** True when the client asked for a stream by flag or by `Accept`. */
export function wantsEventStream(flag: boolean | undefined, accept: string | undefined): boolean {
  return flag === true || (accept ?? '').includes('text/event-stream');
}
