/**
 * OpenAI's server-sent events: `data: <json>` lines (chat completions,
 * ending with `data: [DONE]`) or `event: <type>` + `data:` pairs (the
 * Responses API), on the same bounded, capped SseStream as Cairn's own
 * streams. Headers are sent at once, carrying the session id.
 */
import type { FastifyReply } from 'fastify';
import { SseStream } from '../http/sse.js';
import type { StreamGate } from '../http/stream-gate.js';

export const SESSION_HEADER = 'x-cairn-session-id';

export class OpenAIEventStream {
  private readonly stream: SseStream;

  /** Takes a stream slot (503 before any byte when none is free); the bounded buffer is SseStream's. */
  constructor(reply: FastifyReply, gate: StreamGate, sessionId: string) {
    this.stream = new SseStream(reply, gate, { [SESSION_HEADER]: sessionId });
  }

  /** `data: <json>` (or `event: <type>` first when given). */
  send(data: unknown, event?: string): void {
    this.stream.data(data, event);
  }

  /** Ends the stream, after `data: [DONE]` when `done` is set (chat completions). */
  end(done: boolean): void {
    if (done) this.stream.dataText('[DONE]');
    this.stream.end();
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
