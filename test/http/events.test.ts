/**
 * GET /events over a real socket: `id:` is the event id and increases,
 * `Last-Event-ID` (header or `?lastEventId`) resumes after the given id with
 * no gap and no duplicate, even with events emitted while the replay runs,
 * and `?sessionId` filters. Bad parameters are 400s before any stream starts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventRow } from '../../src/store/store.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

interface SseFrame {
  id: number;
  event: string;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary event fields
  data: any;
}

/** Waits this long at most for an expected frame; a clear failure rather than a hung test. */
const FRAME_WAIT_MS = 10_000;

interface EventStream {
  frames: SseFrame[];
  /** Reads until `done(frames)` is true. */
  until(done: (frames: SseFrame[]) => boolean): Promise<void>;
  close(): void;
}

/** Opens GET /events with node's fetch and parses frames as they arrive. */
async function openEvents(url: string, headers: Record<string, string> = {}): Promise<EventStream> {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  const frames: SseFrame[] = [];
  let buffer = '';

  const parse = (block: string): void => {
    let id: number | undefined;
    let event = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = line.slice(0, colon);
      const value = line.slice(colon + 1).replace(/^ /, '');
      if (field === 'id') id = Number(value);
      else if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    expect(id, `frame without id: ${block}`).toBeTypeOf('number');
    frames.push({ id: id!, event, data: JSON.parse(data.join('\n')) });
  };

  return {
    frames,
    async until(done) {
      const timer = setTimeout(
        () => controller.abort(new Error(`no expected event within ${FRAME_WAIT_MS} ms`)),
        FRAME_WAIT_MS,
      );
      try {
        while (!done(frames)) {
          const { value, done: ended } = await reader.read();
          if (ended) throw new Error('the event stream ended');
          buffer += decoder.decode(value, { stream: true });
          let end: number;
          while ((end = buffer.indexOf('\n\n')) !== -1) {
            parse(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
          }
        }
      } finally {
        clearTimeout(timer);
      }
    },
    close() {
      controller.abort();
    },
  };
}

describe('GET /events', () => {
  let t: TestApp;
  let base: string;
  beforeAll(async () => {
    t = await startTestApp();
    base = await t.app.server.listen({ port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => t.close());

  async function createSession(): Promise<string> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    expect(res.statusCode).toBe(201);
    return res.json().session.id as string;
  }

  async function chat(sessionId: string): Promise<void> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi', sessionId },
    });
    expect(res.statusCode).toBe(200);
  }

  async function storedEvents(sessionId?: string): Promise<EventRow[]> {
    return t.app.store.listEvents({
      afterId: 0,
      limit: 10_000,
      ...(sessionId ? { sessionId } : {}),
    });
  }

  const ids = (frames: { id: number }[]): number[] => frames.map((f) => f.id);

  it('replays the log with increasing ids, then delivers new events live', async () => {
    const first = await createSession();
    await chat(first);
    const stored = await storedEvents();
    expect(stored.length).toBeGreaterThanOrEqual(3);

    const stream = await openEvents(`${base}/events`);
    try {
      await stream.until((f) => f.length >= stored.length);
      expect(ids(stream.frames)).toEqual(ids(stored));
      expect(stream.frames.map((f) => [f.event, f.data])).toEqual(
        stored.map((e) => [e.type, e.data]),
      );
      const created = stream.frames.find((f) => f.event === 'session.created')!;
      expect(created.data).toMatchObject({ sessionId: first, agentName: 'assistant' });

      const second = await createSession();
      await stream.until((f) => f.some((e) => e.data.sessionId === second));
      const live = stream.frames.at(-1)!;
      expect(live).toMatchObject({ event: 'session.created', data: { sessionId: second } });
      const seen = ids(stream.frames);
      for (let i = 1; i < seen.length; i++) expect(seen[i]).toBeGreaterThan(seen[i - 1]!);
    } finally {
      stream.close();
    }
  });

  it('resumes after Last-Event-ID with no duplicate and no gap', async () => {
    await createSession();
    const stored = await storedEvents();
    const resumeFrom = stored[Math.floor(stored.length / 2)]!;
    const expected = stored.filter((e) => e.id > resumeFrom.id);

    const stream = await openEvents(`${base}/events`, { 'last-event-id': String(resumeFrom.id) });
    try {
      await stream.until((f) => f.length >= expected.length);
      expect(ids(stream.frames)).toEqual(ids(expected));

      const later = await createSession();
      await stream.until((f) => f.some((e) => e.data.sessionId === later));
      const all = ids(stream.frames);
      expect(new Set(all).size).toBe(all.length);
      expect(all).toEqual(ids((await storedEvents()).filter((e) => e.id > resumeFrom.id)));
    } finally {
      stream.close();
    }
  });

  it('accepts the resume point as ?lastEventId too', async () => {
    const stored = await storedEvents();
    const from = stored.at(-2)!;
    const stream = await openEvents(`${base}/events?lastEventId=${from.id}`);
    try {
      await stream.until((f) => f.length >= 1);
      expect(stream.frames[0]!.id).toBe(stored.at(-1)!.id);
    } finally {
      stream.close();
    }
  });

  it('loses and repeats nothing when events are emitted while the replay runs', async () => {
    const start = (await storedEvents()).at(-1)!.id;
    const opening = openEvents(`${base}/events`, { 'last-event-id': String(start) });
    // Emitted concurrently with the subscription and the replay query.
    const created = await Promise.all(Array.from({ length: 6 }, () => createSession()));
    const stream = await opening;
    try {
      await stream.until((f) => created.every((id) => f.some((e) => e.data.sessionId === id)));
      const more = await createSession();
      await stream.until((f) => f.some((e) => e.data.sessionId === more));
      const expected = (await storedEvents()).filter((e) => e.id > start);
      expect(ids(stream.frames)).toEqual(ids(expected));
    } finally {
      stream.close();
    }
  });

  it('filters by ?sessionId, in the replay and live', async () => {
    const watched = await createSession();
    const other = await createSession();
    await chat(watched);
    await chat(other);
    const expected = await storedEvents(watched);
    expect(expected.length).toBeGreaterThanOrEqual(3);

    const stream = await openEvents(`${base}/events?sessionId=${watched}`);
    try {
      await stream.until((f) => f.length >= expected.length);
      expect(ids(stream.frames)).toEqual(ids(expected));
      // Live: the other session's turn comes first and must not show up.
      await chat(other);
      await t.app.server.inject({ method: 'POST', url: `/sessions/${watched}/close` });
      await stream.until((f) => f.some((e) => e.event === 'session.closed'));
      expect(stream.frames.every((f) => f.data.sessionId === watched)).toBe(true);
      expect(ids(stream.frames)).toEqual(ids(await storedEvents(watched)));
    } finally {
      stream.close();
    }
  });

  it('still replays the events of a deleted session, ending with session.deleted', async () => {
    const gone = await createSession();
    const del = await t.app.server.inject({ method: 'DELETE', url: `/sessions/${gone}` });
    expect(del.statusCode).toBe(204);
    const stream = await openEvents(`${base}/events?sessionId=${gone}`);
    try {
      await stream.until((f) => f.some((e) => e.event === 'session.deleted'));
      expect(stream.frames.map((f) => f.event)).toEqual(['session.created', 'session.deleted']);
    } finally {
      stream.close();
    }
  });

  it('drops its subscription when the client goes away', async () => {
    const settle = async (count: number): Promise<void> => {
      // The server sees the socket close a moment after the client aborts.
      const deadline = Date.now() + FRAME_WAIT_MS;
      while (t.app.events.subscriberCount !== count && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(t.app.events.subscriberCount).toBe(count);
    };
    await settle(0); // the streams of the earlier tests are gone
    const stream = await openEvents(`${base}/events`);
    try {
      await stream.until((f) => f.length > 0);
      expect(t.app.events.subscriberCount).toBe(1);
    } finally {
      stream.close();
    }
    await settle(0);
  });

  it.each([
    ['a malformed sessionId', '/events?sessionId=nope', {}],
    ['a path in sessionId', '/events?sessionId=..%2F..%2Fetc', {}],
    ['a negative lastEventId', '/events?lastEventId=-1', {}],
    ['a non-numeric lastEventId', '/events?lastEventId=latest', {}],
    ['an unknown parameter', '/events?type=session.created', {}],
    ['a non-numeric Last-Event-ID', '/events', { 'last-event-id': 'abc' }],
    ['a negative Last-Event-ID', '/events', { 'last-event-id': '-5' }],
    ['an oversized Last-Event-ID', '/events', { 'last-event-id': '9'.repeat(40) }],
  ])('rejects %s with 400 VALIDATION_ERROR before streaming', async (_label, url, headers) => {
    const res = await t.app.server.inject({ url, headers });
    expect(res.statusCode).toBe(400);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.json()).toEqual({
      error: { code: 'VALIDATION_ERROR', message: expect.any(String) },
    });
  });
});
