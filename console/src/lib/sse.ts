/**
 * Server-sent events over `fetch`, so the API key travels in the
 * Authorization header (EventSource cannot send headers). The parser is pure;
 * `followEvents` keeps a stream open and resumes it with `Last-Event-ID`.
 */

export interface SseEvent {
  id: string | undefined;
  event: string;
  data: string;
}

/** Turns text chunks into events, following the SSE framing rules we rely on. */
export class SseParser {
  private buffer = '';
  /** A chunk that ends in `\r` may be half of a `\r\n`: wait for the next one. */
  private pendingCr = false;

  feed(chunk: string): SseEvent[] {
    let text = this.pendingCr ? `\r${chunk}` : chunk;
    this.pendingCr = text.endsWith('\r');
    if (this.pendingCr) text = text.slice(0, -1);
    this.buffer += text.replace(/\r\n?/g, '\n');
    const events: SseEvent[] = [];
    let end: number;
    while ((end = this.buffer.indexOf('\n\n')) !== -1) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const event = parseBlock(block);
      if (event) events.push(event);
    }
    return events;
  }
}

function parseBlock(block: string): SseEvent | undefined {
  let id: string | undefined;
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    const value = colon === -1 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'id') id = value;
    else if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  return data.length === 0 ? undefined : { id, event, data: data.join('\n') };
}

/** Reads a `text/event-stream` response body to its end, event by event. */
export async function readEvents(
  response: Response,
  onEvent: (event: SseEvent) => void,
): Promise<void> {
  if (!response.body) return;
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    for (const event of parser.feed(value)) onEvent(event);
  }
}

export interface FollowOptions {
  /** e.g. `/events?sessionId=sess_…` */
  url: string;
  headers: () => Record<string, string>;
  /** The id to resume after (the last event this console has seen). */
  lastEventId: string | undefined;
  onEvent: (event: SseEvent) => void;
  onState?: (state: 'live' | 'reconnecting') => void;
  /** Called on 401: the stream stops, the app asks for a key. */
  onUnauthorized?: () => void;
}

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

/** Follows an event stream until the returned function is called; reconnects with `Last-Event-ID`. */
export function followEvents(options: FollowOptions): () => void {
  const abort = new AbortController();
  let lastId = options.lastEventId;
  let delay = RETRY_MIN_MS;
  const run = async (): Promise<void> => {
    while (!abort.signal.aborted) {
      try {
        const headers: Record<string, string> = {
          accept: 'text/event-stream',
          ...options.headers(),
        };
        if (lastId !== undefined) headers['last-event-id'] = lastId;
        const response = await fetch(options.url, { headers, signal: abort.signal });
        if (response.status === 401) {
          options.onUnauthorized?.();
          return;
        }
        if (response.ok) {
          options.onState?.('live');
          delay = RETRY_MIN_MS;
          await readEvents(response, (event) => {
            if (event.id !== undefined) lastId = event.id;
            options.onEvent(event);
          });
        }
      } catch {
        // The server went away or restarted: try again below.
      }
      if (abort.signal.aborted) return;
      options.onState?.('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, RETRY_MAX_MS);
    }
  };
  void run();
  return () => abort.abort();
}
