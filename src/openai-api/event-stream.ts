/**
 * OpenAI's server-sent events on a hijacked fastify reply: `data: <json>`
 * lines (chat completions, ending with `data: [DONE]`) or `event: <type>` +
 * `data:` pairs (the Responses API). Headers are sent at once, carrying the
 * session id.
 */
import type { FastifyReply } from 'fastify';

export const SESSION_HEADER = 'x-cairn-session-id';

export class OpenAIEventStream {
  constructor(
    private readonly reply: FastifyReply,
    sessionId: string,
  ) {
    reply.hijack();
    reply.raw.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      [SESSION_HEADER]: sessionId,
    });
    reply.raw.flushHeaders();
  }

  private get closed(): boolean {
    return this.reply.raw.destroyed || this.reply.raw.writableEnded;
  }

  /** `data: <json>` (or `event: <type>` first when given). */
  send(data: unknown, event?: string): void {
    if (this.closed) return;
    const eventLine = event !== undefined ? `event: ${event}\n` : '';
    this.reply.raw.write(`${eventLine}data: ${JSON.stringify(data)}\n\n`);
  }

  /** Ends the stream, after `data: [DONE]` when `done` is set (chat completions). */
  end(done: boolean): void {
    if (this.closed) return;
    if (done) this.reply.raw.write('data: [DONE]\n\n');
    this.reply.raw.end();
  }
}

/** An AbortSignal that fires when the client goes away before the reply finished. */
export function disconnectSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) controller.abort(new Error('client disconnected'));
  });
  return controller.signal;
}
