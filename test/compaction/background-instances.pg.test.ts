/**
 * Summaries prepared off the turn on a database shared by two instances
 * (two real apps on one Postgres database, one provider fake): turns
 * alternating between them prepare one summary, never two; and when the
 * instance preparing it stops heartbeating mid-summary, its claim expires
 * and the other instance prepares and lands its own, while the late
 * summary of the first is refused.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import { PATIENT_MS, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const WINDOW = 3_000;
const SLOW_SUMMARY_MS = 2_000;

const userText = (turn: number): string =>
  `turn ${turn}: ` + Array.from({ length: 50 }, (_, i) => `w${turn}x${i}`).join(' ');

let a: TestApp;
let b: CairnApp;
let databaseUrl: string;
/** How long each summary call takes, in the order they arrive. */
let summaryDelays: number[];
let summaryNumber: number;

beforeAll(async () => {
  a = await startTestApp({
    database: 'postgres',
    agents: {
      assistant: { ...TEST_AGENT, defaultCompaction: { autoThreshold: 70, prepareAt: 40 } },
    },
    mainModel: { contextWindow: WINDOW, timeoutMs: PATIENT_MS },
  });
  const settings = loadSettings({ home: a.home, env: {} });
  databaseUrl = settings.database.url!;
  b = await startApp(settings, { logger: false, daemons: false });
});
afterAll(async () => {
  await b?.close();
  await a?.close();
});
beforeEach(() => {
  a.fake!.reset();
  summaryNumber = 0;
  summaryDelays = [];
  a.fake!.setDefault((body: { messages: ChatMessage[] }) =>
    isSummaryRequest(body)
      ? {
          content: `SUMMARY-${++summaryNumber}`,
          delayMs: summaryDelays.shift() ?? SLOW_SUMMARY_MS,
        }
      : {
          content: 'ok',
          usage: { prompt_tokens: estimateMessagesTokens(body.messages), completion_tokens: 1 },
        },
  );
});
afterEach(async () => {
  // Whatever a test left running settles before the next one scripts the fake.
  await new Promise((resolve) => setTimeout(resolve, 100));
});

async function chat(app: CairnApp, turn: number, sessionId?: string) {
  const res = await app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message: userText(turn), ...(sessionId ? { sessionId } : {}) },
  });
  expect(res.statusCode, res.body).toBe(200);
  return res.json<{ sessionId: string; compaction: { trigger: string } | null }>();
}

async function prepared(app: CairnApp, id: string) {
  const res = await app.server.inject({ method: 'GET', url: `/sessions/${id}/context` });
  return res.json<{
    preparedSummary: { status: string; holder: string; forSize: number } | null;
  }>().preparedSummary;
}

async function untilReady(app: CairnApp, id: string) {
  for (let i = 0; i < 200; i++) {
    const view = await prepared(app, id);
    if (view?.status === 'ready') return view;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('the prepared summary never became ready');
}

async function compactions(app: CairnApp, id: string) {
  const res = await app.server.inject({ method: 'GET', url: `/sessions/${id}/compactions` });
  return res.json<{ compactions: { trigger: string; summary: string }[] }>().compactions;
}

/** Chats on `apps` in turn until a summary call arrives; returns the session and the next turn number. */
async function untilPreparing(apps: CairnApp[]): Promise<{ id: string; turn: number }> {
  let turn = 0;
  const id = (await chat(apps[0]!, turn++)).sessionId;
  while (summaryRequestsOf(a.fake!).length === 0) {
    expect(turn, 'the prompt passes prepareAt').toBeLessThan(20);
    await chat(apps[turn % apps.length]!, turn++, id);
  }
  return { id, turn };
}

describe('summaries prepared off the turn, two instances on one database', () => {
  it('turns on both instances while it is prepared: one summary, landed once', async () => {
    const apps = [a.app, b];
    const started = await untilPreparing(apps);
    const id = started.id;
    let turn = started.turn;
    // Both instances finish turns past prepareAt while the first one's summary runs.
    for (let i = 0; i < 4; i++) {
      const envelope = await chat(apps[turn % 2]!, turn++, id);
      expect(envelope.compaction).toBeNull();
    }
    expect(summaryRequestsOf(a.fake!)).toHaveLength(1);
    const ready = await untilReady(b, id);
    expect([a.app.instanceId, b.instanceId]).toContain(ready.holder);

    // Landed by whichever instance runs the next turn.
    const next = await chat(apps[turn % 2]!, turn++, id);
    expect(next.compaction?.trigger).toBe('background');
    expect((await compactions(a.app, id)).map((c) => [c.trigger, c.summary])).toEqual([
      ['background', 'SUMMARY-1'],
    ]);
    expect(summaryRequestsOf(a.fake!).length).toBeLessThanOrEqual(2);
  });

  it('the holder stops heartbeating mid-summary: the other instance prepares and lands its own, the late one is refused', async () => {
    // The first summary (on a) is slow; the takeover's (on b) is quick.
    summaryDelays = [3_000, 0];
    const { id, turn } = await untilPreparing([a.app]);
    const holding = await prepared(b, id);
    expect(holding).toMatchObject({ status: 'preparing', holder: a.app.instanceId });

    // a looks dead to its peers: its heartbeat row is gone (as after a kill, once stale).
    const admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    try {
      await admin.query('DELETE FROM instances WHERE id = $1', [a.app.instanceId]);
    } finally {
      await admin.end();
    }
    // b's next turn finds the claim's holder gone and prepares the summary itself.
    await chat(b, turn, id);
    const ready = await untilReady(b, id);
    expect(ready.holder).toBe(b.instanceId);
    expect(summaryRequestsOf(a.fake!)).toHaveLength(2);

    // a's late summary arrives now, and is not kept: b still holds the ready one.
    await new Promise((resolve) => setTimeout(resolve, 3_200));
    expect(await prepared(b, id)).toMatchObject({ status: 'ready', holder: b.instanceId });

    const landing = await chat(b, turn + 1, id);
    expect(landing.compaction?.trigger).toBe('background');
    expect((await compactions(b, id)).map((c) => [c.trigger, c.summary])).toEqual([
      ['background', 'SUMMARY-2'],
    ]);
  });
});
