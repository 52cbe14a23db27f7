/**
 * Per-key limits on a real app: requests per minute (429 with Retry-After,
 * per key), an MCP JSON-RPC batch counted by its calls (server-wide and per
 * key), and tokens per UTC day (429 BUDGET_EXCEEDED naming the limit and the
 * reset; compaction counts and is refused once the day is spent; the day's
 * usage is stored, so it holds after a restart).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { nextUtcMidnight } from '../../src/http/key-limits.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'limits-admin';
let harness: TestApp | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function issue(t: TestApp, limits: Record<string, number>): Promise<string> {
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name: 'limited', limits },
  });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ secret: string }>().secret;
}

function as(t: TestApp, secret: string, method: 'GET' | 'POST', url: string, payload?: unknown) {
  return t.app.server.inject({
    method,
    url,
    headers: {
      authorization: `Bearer ${secret}`,
      // The MCP transport wants both; anywhere else it would ask for a stream.
      ...(url === '/mcp' ? { accept: 'application/json, text/event-stream' } : {}),
    },
    ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
  });
}

/** A JSON-RPC batch of `n` tool calls to chat_with_assistant. */
function batch(n: number) {
  return Array.from({ length: n }, (_, i) => ({
    jsonrpc: '2.0',
    id: i + 1,
    method: 'tools/call',
    params: { name: 'chat_with_assistant', arguments: { message: `call ${i}` } },
  }));
}

describe('requests per minute, per key', () => {
  it('answers 429 RATE_LIMITED with Retry-After past the limit, for that key only', async () => {
    harness = await startTestApp({ server: { apiKey: ADMIN_KEY }, fake: null });
    const limited = await issue(harness, { requestsPerMinute: 3 });
    const free = await issue(harness, {});
    for (let i = 0; i < 3; i++)
      expect((await as(harness, limited, 'GET', '/sessions')).statusCode).toBe(200);
    const refused = await as(harness, limited, 'GET', '/sessions');
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error.code).toBe('RATE_LIMITED');
    expect(refused.json().error.message).toContain('3 requests per minute');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect((await as(harness, free, 'GET', '/sessions')).statusCode).toBe(200);
  });

  it('counts every call of an MCP batch: 100 calls under a limit of 5 run none', async () => {
    harness = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    const limited = await issue(harness, { requestsPerMinute: 5 });
    const res = await as(harness, limited, 'POST', '/mcp', batch(100));
    expect(res.statusCode).toBe(429);
    expect(res.headers['retry-after']).toBeDefined();
    expect(res.json().error.message).toContain('makes 100 calls');
    expect(harness.fake!.requests).toHaveLength(0);
    expect((await harness.app.store.listSessions({ limit: 10 })).items).toHaveLength(0);
  });

  it('counts every call of an MCP batch against server.rateLimit too', async () => {
    harness = await startTestApp({
      server: { apiKey: ADMIN_KEY, rateLimit: { max: 5, windowMs: 60_000 } },
    });
    const res = await harness.app.server.inject({
      method: 'POST',
      url: '/mcp',
      headers: {
        authorization: `Bearer ${ADMIN_KEY}`,
        accept: 'application/json, text/event-stream',
      },
      payload: batch(100),
    });
    expect(res.statusCode).toBe(429);
    expect(res.headers['retry-after']).toBeDefined();
    expect(harness.fake!.requests).toHaveLength(0);
  });
});

describe('tokens per day, per key', () => {
  it('refuses with BUDGET_EXCEEDED once the day is spent, compaction included, across a restart', async () => {
    harness = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    harness.fake!.setDefault(() => ({
      content: 'an answer',
      usage: { prompt_tokens: 40, completion_tokens: 20 },
    }));
    // Room for a summary's claim: the prompt plus the summary's output maximum.
    const secret = await issue(harness, { tokensPerDay: 10_000 });
    const first = await as(harness, secret, 'POST', '/agents/assistant/chat', { message: 'one' });
    expect(first.statusCode).toBe(200);
    const sessionId = first.json<{ sessionId: string }>().sessionId;
    const second = await as(harness, secret, 'POST', '/agents/assistant/chat', {
      message: 'two',
      sessionId,
    });
    expect(second.statusCode, second.body).toBe(200);
    const keyId = (await harness.app.store.listKeys())[0]!.id;
    const today = new Date().toISOString().slice(0, 10);
    expect(await harness.app.store.keyTokensOn(keyId, today)).toBe(120);

    // Compaction of the key's session is charged to the key (here run by the admin).
    harness.fake!.setDefault(() => ({
      content: 'a summary',
      usage: { prompt_tokens: 7, completion_tokens: 3 },
    }));
    const compact = () =>
      harness!.app.server.inject({
        method: 'POST',
        url: `/sessions/${sessionId}/compact`,
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      });
    const compacted = await compact();
    expect(compacted.statusCode, compacted.body).toBe(200);
    expect(await harness.app.store.keyTokensOn(keyId, today)).toBe(130);

    harness.fake!.setDefault(() => ({
      content: 'an answer',
      usage: { prompt_tokens: 5_000, completion_tokens: 4_900 },
    }));
    const third = await as(harness, secret, 'POST', '/agents/assistant/chat', {
      message: 'three',
      sessionId,
    });
    expect(third.statusCode, third.body).toBe(200);
    expect(await harness.app.store.keyTokensOn(keyId, today)).toBe(10_030);

    const refused = await as(harness, secret, 'POST', '/agents/assistant/chat', {
      message: 'four',
      sessionId,
    });
    expect(refused.statusCode).toBe(429);
    const { code, message } = refused.json().error;
    expect(code).toBe('BUDGET_EXCEEDED');
    expect(message).toContain('spent 10030 of its 10000 tokens for today (tokensPerDay)');
    expect(message).toContain(nextUtcMidnight(new Date()).toISOString());
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    // Reading is not spending.
    expect((await as(harness, secret, 'GET', `/sessions/${sessionId}`)).statusCode).toBe(200);
    // Nothing of the refused turn was stored.
    const messages = await harness.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
    expect(messages.map((m) => m.content)).not.toContain('four');
    // A compaction of the spent key's session is refused too, whoever asks for it.
    const refusedCompaction = await compact();
    expect(refusedCompaction.statusCode).toBe(429);
    expect(refusedCompaction.json().error.code).toBe('BUDGET_EXCEEDED');
    expect(refusedCompaction.json().error.message).toContain('tokensPerDay');

    // A restarted server reads the day's usage from the database.
    await harness.app.close();
    const again = await startApp(loadSettings({ home: harness.home, env: {} }), {
      logger: false,
      daemons: false,
    });
    try {
      const afterRestart = await again.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        headers: { authorization: `Bearer ${secret}` },
        payload: { message: 'four' },
      });
      expect(afterRestart.statusCode).toBe(429);
      expect(afterRestart.json().error.code).toBe('BUDGET_EXCEEDED');
    } finally {
      await again.close();
    }
    // The harness closes its app again: harmless.
  });
});

describe('Retry-After on refusals a client may retry', () => {
  it('is on the 503 of a full stream cap', async () => {
    harness = await startTestApp({ fake: null, server: { maxStreams: 1 } });
    const url = await harness.app.server.listen({ port: 0, host: '127.0.0.1' });
    const controller = new AbortController();
    const first = await fetch(`${url}/events`, { signal: controller.signal });
    expect(first.status).toBe(200);
    try {
      const second = await fetch(`${url}/events`);
      expect(second.status).toBe(503);
      // The stream gate names its own wait; every 503 says one.
      expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(((await second.json()) as { error: { code: string } }).error.code).toBe(
        'SERVICE_UNAVAILABLE',
      );
    } finally {
      controller.abort();
    }
  });
});
