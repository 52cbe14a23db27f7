/**
 * A model that answers `200`, sends the start of its body and
 * stalls. The role's `timeoutMs` bounds the whole call, body included, plain
 * and streamed: the turn fails with 504 LLM_TIMEOUT long before the default
 * timeout, and the session's queue is free for the next chat at once.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_MODEL_TIMEOUT_MS } from '../../src/config/settings.js';
import { chatOn, startTestApp, type TestApp } from '../helpers/test-app.js';

const TIMEOUT_MS = 1_000;

describe('a model that stalls after its headers', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ mainModel: { timeoutMs: TIMEOUT_MS, maxRetries: 0 } });
    // The fake's first request compiles OpenAI's schema (seconds on a busy
    // machine): pay that here, outside the model's timeout.
    await fetch(`${t.fake!.baseURL}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'warm up' }] }),
    });
  });
  afterAll(() => t.close());
  beforeEach(() => t.fake!.reset());

  /**
   * A session with one answered turn, so the stalled turn is not its first. */
  async function newSession(): Promise<string> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'warm up' },
    });
    expect(res.statusCode).toBe(200);
    return res.json<{ sessionId: string }>().sessionId;
  }

  it('fails a plain call with 504 LLM_TIMEOUT, then the same session chats again', async () => {
    const sessionId = await newSession();
    t.fake!.script({ stallMidBody: true });
    const started = Date.now();
    const stalled = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'first', sessionId },
    });
    const elapsed = Date.now() - started;
    expect(stalled.statusCode).toBe(504);
    expect(stalled.json().error.code).toBe('LLM_TIMEOUT');
    expect(elapsed).toBeLessThan(DEFAULT_MODEL_TIMEOUT_MS / 4);

    const next = await chatOn(t.app, sessionId, 'second');
    expect(next.statusCode).toBe(200);
    expect(next.json().reply).toBe('echo: second');
  });

  it('fails a streamed call with an LLM_TIMEOUT error event, then the same session chats again', async () => {
    const sessionId = await newSession();
    t.fake!.script({ stallMidBody: true });
    const started = Date.now();
    const stalled = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'first', sessionId, stream: true },
    });
    const elapsed = Date.now() - started;
    expect(stalled.body).toContain('event: error');
    expect(stalled.body).toContain('LLM_TIMEOUT');
    expect(stalled.body).not.toContain('event: done');
    expect(elapsed).toBeLessThan(DEFAULT_MODEL_TIMEOUT_MS / 4);

    const next = await chatOn(t.app, sessionId, 'second');
    expect(next.statusCode).toBe(200);
    expect(next.json().reply).toBe('echo: second');
  });
});
