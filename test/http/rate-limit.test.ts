/**
 * Rate limiting: with `server.rateLimit` set, a client over
 * its budget gets 429 RATE_LIMITED with Retry-After, in the API's envelope;
 * clients are counted apart (per API key, else per address); /health is
 * never limited; with no setting nothing is limited.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

describe('server.rateLimit', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it('answers 429 RATE_LIMITED with Retry-After once a client is over its budget', async () => {
    t = await startTestApp({ fake: null, server: { rateLimit: { max: 3, windowMs: 60_000 } } });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++)
      statuses.push((await t.app.server.inject({ url: '/agents' })).statusCode);
    expect(statuses).toEqual([200, 200, 200]);
    const limited = await t.app.server.inject({ url: '/agents' });
    expect(limited.statusCode).toBe(429);
    expect(limited.json().error.code).toBe('RATE_LIMITED');
    expect(limited.json().error.message).toMatch(/at most 3 every 60 s/);
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    // Nothing ran: a limited chat stores nothing.
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi' },
    });
    expect(chat.statusCode).toBe(429);
    const sessions = await t.app.store.listSessions({ limit: 10 });
    expect(sessions.items).toHaveLength(0);
    // Health checks are never limited.
    expect((await t.app.server.inject({ url: '/health' })).statusCode).toBe(200);
  });

  it('counts clients apart: another address has its own budget', async () => {
    t = await startTestApp({ fake: null, server: { rateLimit: { max: 1, windowMs: 60_000 } } });
    const from = (remoteAddress: string) => t!.app.server.inject({ url: '/agents', remoteAddress });
    expect((await from('10.0.0.1')).statusCode).toBe(200);
    expect((await from('10.0.0.1')).statusCode).toBe(429);
    expect((await from('10.0.0.2')).statusCode).toBe(200);
  });

  it('an MCP batch and single requests share one bucket: every call of the batch counts', async () => {
    t = await startTestApp({ fake: null, server: { rateLimit: { max: 5, windowMs: 60_000 } } });
    const mcpBatch = (size: number, remoteAddress = '127.0.0.1') =>
      t!.app.server.inject({
        method: 'POST',
        url: '/mcp',
        remoteAddress,
        headers: { accept: 'application/json, text/event-stream' },
        payload: Array.from({ length: size }, (_, i) => ({
          jsonrpc: '2.0',
          id: i + 1,
          method: 'tools/list',
        })),
      });
    // Six calls at once never fit under five.
    expect((await mcpBatch(6, '10.0.0.6')).statusCode).toBe(429);
    // Four calls, then one request: five; the next is refused.
    expect((await mcpBatch(4)).statusCode).not.toBe(429);
    expect((await t.app.server.inject({ url: '/agents' })).statusCode).toBe(200);
    const over = await t.app.server.inject({ url: '/agents' });
    expect(over.statusCode).toBe(429);
    expect(over.json().error.code).toBe('RATE_LIMITED');
  });

  it('limits nothing when rateLimit is not set', async () => {
    t = await startTestApp({ fake: null });
    for (let i = 0; i < 50; i++) {
      expect((await t.app.server.inject({ url: '/agents' })).statusCode).toBe(200);
    }
  });

  it('rejects a rateLimit setting without both fields', async () => {
    await expect(startTestApp({ fake: null, server: { rateLimit: { max: 3 } } })).rejects.toThrow(
      /rateLimit/,
    );
  });
});
