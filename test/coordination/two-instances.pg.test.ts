/**
 * Two Cairn apps in one process on one fresh Postgres database, each the
 * real composition root (its own pool, session lock, heartbeat and event
 * feed): concurrent turns on one session through both never interleave, and
 * `GET /events` on one streams the other's events, resumable with
 * Last-Event-ID.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { AdvisorySessionLock } from '../../src/coordination/advisory-session-lock.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let a: TestApp;
let b: CairnApp;
let bUrl: string;

beforeAll(async () => {
  a = await startTestApp({ database: 'postgres' });
  b = await startApp(loadSettings({ home: a.home, env: {} }), { logger: false, daemons: false });
  bUrl = await b.server.listen({ port: 0, host: '127.0.0.1' });
  // Slow replies, so turns on one session really overlap in time.
  a.fake!.setDefault((body: { messages: { content: string }[] }) => ({
    content: `re: ${body.messages.at(-1)!.content}`,
    delayMs: 30,
  }));
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});

async function chat(app: CairnApp, message: string, sessionId?: string) {
  const res = await app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, ...(sessionId ? { sessionId } : {}) },
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json<{ sessionId: string; reply: string }>();
}

/** Reads SSE frames from GET /events on `base` until `enough` says stop. */
async function readEvents(
  base: string,
  headers: Record<string, string>,
  enough: (events: { id: number; event: string; data: Record<string, unknown> }[]) => boolean,
) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 10_000);
  const res = await fetch(`${base}/events`, { headers, signal: controller.signal });
  const events: { id: number; event: string; data: Record<string, unknown> }[] = [];
  const decoder = new TextDecoder();
  let text = '';
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const frame = text.slice(0, end);
        text = text.slice(end + 2);
        const field = (name: string) =>
          frame
            .split('\n')
            .find((line) => line.startsWith(`${name}: `))
            ?.slice(name.length + 2);
        const id = field('id');
        if (id === undefined) continue;
        events.push({ id: Number(id), event: field('event')!, data: JSON.parse(field('data')!) });
      }
      if (enough(events)) break;
    }
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return events;
}

describe('two instances on one Postgres database', () => {
  it('both use the shared session lock', () => {
    expect(a.app.sessionLock).toBeInstanceOf(AdvisorySessionLock);
    expect(b.sessionLock).toBeInstanceOf(AdvisorySessionLock);
    expect(a.app.instanceId).not.toBe(b.instanceId);
  });

  it('turns on one session through both instances never interleave', async () => {
    const { sessionId } = await chat(a.app, 'start');
    await Promise.all(
      Array.from({ length: 8 }, (_, i) => chat(i % 2 === 0 ? a.app : b, `m${i}`, sessionId)),
    );
    const res = await b.server.inject({ url: `/sessions/${sessionId}/messages?limit=100` });
    const messages = res.json<{ messages: { role: string; content: string }[] }>().messages;
    const turns = messages.filter((m) => m.role !== 'system');
    expect(turns).toHaveLength(18);
    for (let i = 0; i < turns.length; i += 2) {
      expect(turns[i]!.role).toBe('user');
      expect(turns[i + 1]).toEqual(
        expect.objectContaining({ role: 'assistant', content: `re: ${turns[i]!.content}` }),
      );
    }
  });

  it("GET /events on B streams A's events live, and resumes after Last-Event-ID", async () => {
    // The session exists first, so the stream knows what to wait for.
    const created = await a.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    const sessionId = created.json<{ session: { id: string } }>().session.id;
    const live = readEvents(bUrl, {}, (events) =>
      events.some((e) => e.event === 'message.created' && e.data.sessionId === sessionId),
    );
    // Let B's stream subscribe before A runs the turn (a late one replays it anyway).
    await new Promise((r) => setTimeout(r, 200));
    await chat(a.app, 'seen elsewhere?', sessionId);
    const seen = await live;
    const ofTurn = seen.filter((e) => e.data.sessionId === sessionId);
    expect(ofTurn.map((e) => e.event)).toContain('message.created');
    const ids = seen.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));

    // A client that got the first of them resumes on B and gets the rest.
    const first = ofTurn[0]!.id;
    const resumed = await readEvents(bUrl, { 'last-event-id': String(first) }, (events) =>
      events.some((e) => e.id >= ofTurn.at(-1)!.id),
    );
    expect(resumed[0]!.id).toBeGreaterThan(first);
    expect(resumed.map((e) => e.id)).toEqual(
      expect.arrayContaining(ofTurn.slice(1).map((e) => e.id)),
    );
  });

  it('a stream opened on B while nobody there listened carries every event once, in order', async () => {
    // B has no open stream: its feed has left A's commits to the poll.
    const { sessionId } = await chat(a.app, 'before anyone listens on B');
    // Until the reply of the second turn (system 1, user 2, reply 3, user 4, reply 5).
    const stream = readEvents(bUrl, {}, (events) =>
      events.some(
        (e) => e.event === 'message.created' && e.data.sessionId === sessionId && e.data.seq === 5,
      ),
    );
    await new Promise((r) => setTimeout(r, 200));
    await chat(a.app, 'while B listens', sessionId);
    const seen = await stream;
    const stored = await a.app.store.listEvents({ afterId: 0, limit: 10_000 });
    const upTo = seen.at(-1)!.id;
    // The replay and the live feed meet without a gap or a repeat.
    expect(seen.map((e) => e.id)).toEqual(stored.filter((e) => e.id <= upTo).map((e) => e.id));
  });
});
