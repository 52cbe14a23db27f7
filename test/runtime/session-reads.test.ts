/**
 * A chat turn reads its session once per model call at most, so its cost does
 * not grow with the number of calls. The
 * real store of a real app, with `findSession` (and `findSessionWithWaitingTask`)
 * counted on the way through:
 * a one-model-call turn reads its session once, under the session's slot
 * (where it may have been closed or reset while the turn queued), whether
 * the turn starts the session or continues it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let t: TestApp;
let reads = 0;

beforeAll(async () => {
  t = await startTestApp({});
  const store = t.app.store;
  const findSession = store.findSession.bind(store);
  store.findSession = (id) => {
    reads++;
    return findSession(id);
  };
  // The turn's read under the slot also gives the task waiting on the session.
  const withWaitingTask = store.findSessionWithWaitingTask.bind(store);
  store.findSessionWithWaitingTask = (id) => {
    reads++;
    return withWaitingTask(id);
  };
});
afterAll(async () => {
  await t.close();
});

async function chat(message: string, sessionId?: string) {
  reads = 0;
  const calls = t.fake!.requests.length;
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, ...(sessionId ? { sessionId } : {}) },
  });
  expect(res.statusCode, res.body).toBe(200);
  expect(t.fake!.requests.length - calls).toBe(1);
  return { sessionId: res.json<{ sessionId: string }>().sessionId, reads };
}

describe('session reads of a chat turn', () => {
  it('a one-model-call turn reads its session once', async () => {
    const first = await chat('hello');
    expect(first.reads).toBe(1);
    const second = await chat('again', first.sessionId);
    expect(second.reads).toBe(1);
  });

  it('checks the session when the turn comes: a chat queued behind a close gets SESSION_CLOSED', async () => {
    const { sessionId } = await chat('first');
    const calls = t.fake!.requests.length;
    t.fake!.script({ content: 'slow', delayMs: 200 });
    const post = (url: string, payload?: object) =>
      t.app.server.inject({ method: 'POST', url, ...(payload ? { payload } : {}) });
    let answered = false;
    const running = post('/agents/assistant/chat', { message: 'slow one', sessionId }).finally(
      () => (answered = true),
    );
    // Queued in this order behind the running turn: the close, then a chat.
    while (!t.app.sessionLock.isBusy(sessionId) && !answered)
      await new Promise((r) => setTimeout(r, 5));
    let closed = false;
    const close = post(`/sessions/${sessionId}/close`).finally(() => (closed = true));
    // The chat goes after the close: once the close waits in the queue (or is done).
    while (t.app.sessionLock.size < 2 && !closed) await new Promise((r) => setTimeout(r, 5));
    const late = post('/agents/assistant/chat', { message: 'too late', sessionId });
    expect((await running).statusCode).toBe(200);
    expect((await close).statusCode).toBe(200);
    const refused = await late;
    expect(refused.statusCode, refused.body).toBe(400);
    expect(refused.json()).toMatchObject({ error: { code: 'SESSION_CLOSED' } });
    expect(t.fake!.requests.length - calls).toBe(1);
  });

  it('a chat on a missing session is 404 SESSION_NOT_FOUND after one read', async () => {
    reads = 0;
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'anyone?', sessionId: 'sess_doesnotexist' },
    });
    expect(res.statusCode, res.body).toBe(404);
    expect(res.json()).toMatchObject({ error: { code: 'SESSION_NOT_FOUND' } });
    expect(reads).toBe(1);
  });
});
