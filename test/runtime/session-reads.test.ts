/**
 * Issue 8: a chat turn reads its session once per model call at most. The
 * real store of a real app, with `findSession` counted on the way through:
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
});
