/**
 * Many instances, one database, with real
 * processes: three `cairn serve` on one fresh Postgres database, clients
 * chatting on shared sessions through all three, and `kill -9` of one in the
 * middle of the load. Afterwards: every acknowledged turn is stored (its user
 * message followed at once by its reply — never interleaved with another
 * turn), a daemon ticked once per slot across the three, the events of turns
 * run on A reached B's /events stream, and the dead instance's running task
 * became `interrupted` while a live peer's running task was left alone.
 */
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from './spawn-server.js';

const TICKER = {
  name: 'ticker',
  description: 'Ticks every second',
  system: 'You are a daemon.',
  tools: [],
  daemon: { every: '1s', prompt: 'Report.' },
};
/** Model calls of task inputs starting with this outlive the test's kill. */
const SLOW = 'SLOW';
const LOAD_MS = 4_000;
const KILL_AFTER_MS = 1_500;
const CLIENTS = 6;

interface Ack {
  sessionId: string;
  message: string;
  via: string;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary response fields
async function call(url: string, init?: { body?: object }): Promise<{ status: number; json: any }> {
  const res = await fetch(url, {
    method: init?.body ? 'POST' : 'GET',
    ...(init?.body
      ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(init.body) }
      : {}),
  });
  return { status: res.status, json: await res.json() };
}

/** Collects GET /events frames (id, event, data) until aborted. */
function collectEvents(base: string) {
  const events: { id: number; event: string; data: Record<string, unknown> }[] = [];
  const controller = new AbortController();
  const done = (async () => {
    const res = await fetch(`${base}/events`, { signal: controller.signal });
    const decoder = new TextDecoder();
    let text = '';
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      text += decoder.decode(chunk, { stream: true });
      let end: number;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const frame = text.slice(0, end).split('\n');
        text = text.slice(end + 2);
        const field = (name: string) =>
          frame.find((line) => line.startsWith(`${name}: `))?.slice(name.length + 2);
        const id = field('id');
        if (id !== undefined)
          events.push({ id: Number(id), event: field('event')!, data: JSON.parse(field('data')!) });
      }
    }
  })().catch(() => undefined);
  return {
    events,
    async stop() {
      controller.abort();
      await done;
    },
  };
}

describe('three instances on one Postgres database', () => {
  let fake: FakeLlmServer;
  let db: TestDatabase;
  let home: string;
  let servers: ServerProcess[] = [];

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault((body: { messages: { role: string; content: string }[] }) => {
      const last = body.messages.filter((m) => m.role === 'user').at(-1)?.content ?? '';
      return { content: `re: ${last}`, delayMs: last.startsWith(SLOW) ? 60_000 : 40 };
    });
    db = await createTestDatabase('cairn_p2_multi');
    home = makeHome(
      {
        agents: { assistant: TEST_AGENT, ticker: TICKER },
        mainModel: { timeoutMs: 90_000 },
      },
      fake.baseURL,
      db.url,
    );
    // One first, so the migrations are in place; then the two others at once.
    servers = [await spawnServer({ home, daemons: true })];
    servers.push(
      ...(await Promise.all([
        spawnServer({ home, daemons: true }),
        spawnServer({ home, daemons: true }),
      ])),
    );
  }, 60_000);

  afterAll(async () => {
    for (const server of servers) await server.stop('SIGKILL');
    await fake?.close();
    await db?.drop();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it('loses no acknowledged turn, never interleaves, ticks once per slot, shares events, interrupts only the dead instance’s task', async () => {
    const [a, b, c] = servers as [ServerProcess, ServerProcess, ServerProcess];
    const health = await Promise.all(servers.map((s) => call(`${s.url}/health`)));
    const instanceIds = health.map((h) => h.json.instance as string);
    expect(health.map((h) => h.json.database)).toEqual(['postgres', 'postgres', 'postgres']);
    expect(new Set(instanceIds).size).toBe(3);

    // A running task on C (to be killed) and one on A (a live peer).
    const onC = await call(`${c.url}/agents/assistant/tasks`, { body: { input: `${SLOW} on C` } });
    const onA = await call(`${a.url}/agents/assistant/tasks`, { body: { input: `${SLOW} on A` } });
    expect([onC.status, onA.status]).toEqual([201, 201]);

    const stream = collectEvents(b.url);
    const sessions: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await call(`${a.url}/sessions`, { body: { agentName: 'assistant' } });
      expect(res.status).toBe(201);
      sessions.push(res.json.session.id as string);
    }

    // The load: every client round-robins over the instances still alive.
    const alive = new Set([a, b, c]);
    const acks: Ack[] = [];
    const failures: string[] = [];
    const loadEnds = Date.now() + LOAD_MS;
    const killer = (async () => {
      await new Promise((r) => setTimeout(r, KILL_AFTER_MS));
      alive.delete(c);
      await c.stop('SIGKILL');
    })();
    await Promise.all(
      Array.from({ length: CLIENTS }, async (_, client) => {
        for (let n = 0; Date.now() < loadEnds; n++) {
          const targets = [...alive];
          const server = targets[(client + n) % targets.length]!;
          const sessionId = sessions[(client + n) % sessions.length]!;
          const message = `c${client}-${n}`;
          try {
            const res = await call(`${server.url}/agents/assistant/chat`, {
              body: { message, sessionId },
            });
            if (res.status === 200) acks.push({ sessionId, message, via: server.url });
            else failures.push(`${res.status} ${JSON.stringify(res.json)}`);
          } catch {
            // The killed instance: its connection died; nothing was acknowledged.
            if (server !== c) failures.push(`${server.url} refused`);
          }
        }
      }),
    );
    await killer;
    expect(failures).toEqual([]);
    expect(acks.length).toBeGreaterThan(20);

    // No acknowledged turn lost, and each turn's messages are contiguous.
    for (const sessionId of sessions) {
      const res = await call(`${a.url}/sessions/${sessionId}/messages?limit=1000`);
      const messages = (res.json.messages as { role: string; content: string }[]).filter(
        (m) => m.role !== 'system',
      );
      for (const [i, m] of messages.entries()) {
        if (m.role !== 'assistant') continue;
        expect(messages[i - 1], `reply ${i} in ${sessionId}`).toEqual(
          expect.objectContaining({ role: 'user', content: m.content.replace(/^re: /, '') }),
        );
      }
      const users = messages.map((m, i) =>
        m.role === 'user' ? `${m.content}->${messages[i + 1]?.content ?? ''}` : '',
      );
      for (const ack of acks.filter((x) => x.sessionId === sessionId))
        expect(users).toContain(`${ack.message}->re: ${ack.message}`);
    }

    // Turns acknowledged by A reached B's event stream.
    const fromA = acks.filter((x) => x.via === a.url).map((x) => x.sessionId);
    expect(fromA.length).toBeGreaterThan(0);
    await expect
      .poll(
        () =>
          stream.events.filter(
            (e) => e.event === 'message.created' && fromA.includes(e.data.sessionId as string),
          ).length,
        { timeout: 5_000 },
      )
      .toBeGreaterThan(0);
    const ids = stream.events.map((e) => e.id);
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    await stream.stop();

    // The dead instance's task is interrupted once its heartbeat is stale; A's runs on.
    await expect
      .poll(async () => (await call(`${a.url}/tasks/${onC.json.task.id}`)).json.task.status, {
        timeout: 20_000,
        interval: 500,
      })
      .toBe('interrupted');
    expect((await call(`${b.url}/tasks/${onA.json.task.id}`)).json.task.status).toBe('running');

    // The daemon ticked once per slot across the three: slots are a second
    // apart, and a slot two instances both ran would start twice within a few
    // milliseconds (each arms it for the same instant). A tick that starts late
    // on a loaded machine only narrows the gap to the next slot's (484 ms was
    // seen with the other core busy), so the bound is well under a second.
    const ticks = await call(`${a.url}/tasks?agentName=ticker&limit=100`);
    const starts = (ticks.json.tasks as { created_at: string }[])
      .map((t) => Date.parse(t.created_at))
      .sort((x, y) => x - y);
    expect(starts.length).toBeGreaterThan(3);
    const gaps = starts.slice(1).map((t, i) => t - starts[i]!);
    expect(Math.min(...gaps)).toBeGreaterThan(200);
    expect(starts.length).toBeLessThanOrEqual(Math.floor((starts.at(-1)! - starts[0]!) / 1000) + 2);
  }, 60_000);
});
