/**
 * Shutdown with open event streams: an SSE stream is never idle, so closing
 * the app must end it rather than wait for the client (which would hold a
 * SIGTERM until the grace period runs out).
 */
import { rmSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startTestApp } from '../helpers/test-app.js';

describe('GET /events during shutdown', () => {
  it('app.close() ends open event streams and resolves', async () => {
    const t = await startTestApp({ fake: null });
    const address = await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const response = await fetch(`${address}/events`);
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    await t.app.sessions.create({ agentName: 'assistant' });
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toContain('event: session.created');

    let closed = false;
    const closing = t.app.close().then(() => (closed = true));
    // The stream ends (done) instead of hanging; then close() finishes.
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
    }
    await closing;
    expect(closed).toBe(true);
    rmSync(t.home, { recursive: true, force: true });
  });
});
