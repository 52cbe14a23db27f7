/**
 * A busy database must not freeze the event loop. A real
 * `cairn serve` process sends a chat while another connection (this test
 * process) holds the write lock with BEGIN IMMEDIATE for a few seconds.
 * Meanwhile `/health` keeps answering, well before the lock is released;
 * once it is released the chat completes.
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { dbPathOf, spawnServer, type ServerProcess } from '../process/spawn-server.js';

/** Shorter than the store's busy budget (5 s), so the chat waits it out. */
const HOLD_MS = 3_000;
const HEALTH_POLL_MS = 100;

describe('a database held busy by another connection', () => {
  let fake: FakeLlmServer | undefined;
  let server: ServerProcess | undefined;
  let home: string | undefined;
  afterEach(async () => {
    await server?.stop('SIGKILL');
    await fake?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('keeps /health answering while a chat waits for the lock, then the chat completes', async () => {
    fake = await startFakeLlmServer();
    home = makeHome({}, fake.baseURL);
    server = await spawnServer({ home });
    const url = server.url;

    const holder = new Database(dbPathOf(home));
    holder.exec('BEGIN IMMEDIATE');
    holder.exec("UPDATE sessions SET title = 'held' WHERE 0");
    const lockedAt = Date.now();
    let releasedAt = Infinity;

    let chatDoneAt = 0;
    const chat = fetch(`${url}/agents/assistant/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'while the database is busy' }),
    }).then(async (res) => {
      chatDoneAt = Date.now();
      return { status: res.status, body: (await res.json()) as { reply?: string } };
    });

    // Health checks while the lock is held: each answered, and fast relative
    // to the hold (a frozen loop would answer only after the release).
    const healthAnsweredAt: number[] = [];
    const latencies: number[] = [];
    while (Date.now() - lockedAt < HOLD_MS) {
      const sent = Date.now();
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(HOLD_MS * 2) });
      expect(res.status).toBe(200);
      healthAnsweredAt.push(Date.now());
      latencies.push(Date.now() - sent);
      await new Promise((resolve) => setTimeout(resolve, HEALTH_POLL_MS));
    }
    holder.exec('ROLLBACK');
    releasedAt = Date.now();
    holder.close();

    // Several health answers came in while the lock was still held.
    expect(healthAnsweredAt.filter((at) => at < releasedAt).length).toBeGreaterThanOrEqual(3);
    expect(Math.max(...latencies)).toBeLessThan(HOLD_MS / 2);

    const result = await chat;
    expect(result.status).toBe(200);
    expect(result.body.reply).toBe('echo: while the database is busy');
    // It could not have been stored before the lock was released.
    expect(chatDoneAt).toBeGreaterThanOrEqual(releasedAt);
  });
});
