/**
 * SIGTERM while a turn runs. A real `cairn serve` process
 * gets SIGTERM while its model call is still waiting on the fake (1.5 s):
 * the running turn drains and answers 200 with its reply stored, a request
 * that arrives during the drain is refused (503, or the connection is
 * refused once the listener is closed), and the process exits with code 0.
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { dbPathOf, spawnServer, type ServerProcess } from './spawn-server.js';

const SLOW_REPLY_DELAY_MS = 1_500;
/** What `cairn serve` logs when the signal handler starts draining (src/cli/serve.ts). */
const DRAINING_LOG = 'SIGTERM: draining';
const WAIT_TIMEOUT_MS = 10_000;

async function waitFor(what: string, condition: () => boolean): Promise<void> {
  const deadline = Date.now() + WAIT_TIMEOUT_MS;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function chat(server: ServerProcess, message: string): Promise<Response> {
  return fetch(`${server.url}/agents/assistant/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message }),
  });
}

describe('SIGTERM during a running turn', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess | undefined;

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({}, fake.baseURL);
  });

  afterAll(async () => {
    await server?.stop('SIGKILL');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('drains the running turn, refuses new work, and exits 0', async () => {
    // Info level, so the test can see when the signal handler has run.
    server = await spawnServer({ home, env: { CAIRN_LOG_LEVEL: 'info' } });
    const running = server;
    fake.script({ content: 'the slow reply', delayMs: SLOW_REPLY_DELAY_MS });

    let drainingBeforeReply: boolean | undefined;
    const inFlight = chat(running, 'a long question').then(async (res) => {
      drainingBeforeReply = running.output().includes(DRAINING_LOG);
      return {
        status: res.status,
        body: (await res.json()) as { reply: string; sessionId: string },
      };
    });
    // The turn is running once its model call has reached the fake.
    await waitFor('the model call', () => fake.requests.length === 1);

    running.child.kill('SIGTERM');
    await waitFor('the draining log line', () => running.output().includes(DRAINING_LOG));

    const late = await chat(running, 'too late').then(
      (res) => `HTTP ${res.status}`,
      () => 'connection refused or reset',
    );
    expect(['HTTP 503', 'connection refused or reset']).toContain(late);

    const answered = await inFlight;
    expect(answered.status).toBe(200);
    expect(answered.body.reply).toBe('the slow reply');
    // The reply came after the server had started draining: it was drained, not merely fast.
    expect(drainingBeforeReply).toBe(true);

    expect(await running.exited).toEqual({ code: 0, signal: null });
    // It exited because the drain finished, not because the grace period ran out.
    expect(running.output()).not.toContain('grace period over');
    server = undefined;
    // The late request never reached the model.
    expect(fake.requests).toHaveLength(1);

    const db = new Database(dbPathOf(home), { readonly: true });
    try {
      const stored = db
        .prepare(`SELECT role, content FROM messages WHERE session_id = ? ORDER BY seq`)
        .all(answered.body.sessionId);
      expect(stored).toEqual([
        { role: 'system', content: TEST_AGENT.system },
        { role: 'user', content: 'a long question' },
        { role: 'assistant', content: 'the slow reply' },
      ]);
      expect(
        db.prepare('SELECT COUNT(*) AS n FROM messages WHERE content = ?').get('too late'),
      ).toEqual({ n: 0 });
    } finally {
      db.close();
    }
  }, 60_000);
});
