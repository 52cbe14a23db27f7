/** Server-sent events on a hijacked fastify reply. */
import type { FastifyReply } from 'fastify';

export class SseStream {
  private closed = false;

  constructor(private readonly reply: FastifyReply) {
    reply.hijack();
    reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    // Send the headers now: a stream with nothing to replay would otherwise
    // leave the client waiting for its headers until the first event.
    reply.raw.flushHeaders();
    reply.raw.on('close', () => {
      this.closed = true;
    });
  }

  get isClosed(): boolean {
    return this.closed || this.reply.raw.destroyed;
  }

  send(event: string, data: unknown, id?: number): void {
    if (this.isClosed) return;
    const idLine = id !== undefined ? `id: ${id}\n` : '';
    this.reply.raw.write(`${idLine}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  comment(text: string): void {
    if (!this.isClosed) this.reply.raw.write(`: ${text}\n\n`);
  }

  end(): void {
    if (!this.isClosed) this.reply.raw.end();
    this.closed = true;
  }
}

/** True when the client asked for a stream by flag or by `Accept`. */
export function wantsEventStream(flag: boolean | undefined, accept: string | undefined): boolean {
  return flag === true || (accept ?? '').includes('text/event-stream');
}
