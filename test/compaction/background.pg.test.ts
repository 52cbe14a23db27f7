/**
 * Summaries prepared off the turn (`prepareAt`): once the prompt passes it,
 * the next summary is computed after the turn's reply while the following
 * turns go on without waiting for the (slow) summariser — even past
 * `autoThreshold` — until a request would not fit the window, which waits
 * for that same summary instead of paying a second one. A summary that is
 * ready lands at the next turn's start, recorded with trigger `background`,
 * announced by `context.compacting`, and shown by GET /sessions/:id/context
 * while it is pending. A bad `prepareAt` is refused with its reason.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { loadAgents } from '../../src/agents/load-agents.js';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  DATABASES,
  PATIENT_MS,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const WINDOW = 3_000;
const PREPARE_AT = 40;
const AUTO_THRESHOLD = 70;
/** Long enough that a handful of turns finish while it runs. */
const SLOW_SUMMARY_MS = 3_000;

/** A couple of hundred tokens, different every turn. */
const userText = (turn: number): string =>
  `turn ${turn}: ` + Array.from({ length: 50 }, (_, i) => `w${turn}x${i}`).join(' ');

interface Envelope {
  sessionId: string;
  compaction: { trigger: string; runs: number } | null;
}

interface Prepared {
  status: 'preparing' | 'ready' | 'outdated';
  holder: string;
  messages: number | null;
}

describe.each(DATABASES)('summaries prepared off the turn (%s)', (database) => {
  let t: TestApp;
  let summaryNumber = 0;

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: {
          ...TEST_AGENT,
          defaultCompaction: { autoThreshold: AUTO_THRESHOLD, prepareAt: PREPARE_AT },
        },
      },
      mainModel: { contextWindow: WINDOW, timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    summaryNumber = 0;
    t.fake!.setDefault((body: { messages: ChatMessage[] }) =>
      isSummaryRequest(body)
        ? { content: `SUMMARY-${++summaryNumber}`, delayMs: SLOW_SUMMARY_MS }
        : {
            content: 'ok',
            usage: { prompt_tokens: estimateMessagesTokens(body.messages), completion_tokens: 1 },
          },
    );
  });

  const get = <T>(url: string) =>
    t.app.server.inject({ method: 'GET', url }).then((res) => res.json<T>());
  const prepared = async (id: string) =>
    (await get<{ preparedSummary: Prepared | null }>(`/sessions/${id}/context`)).preparedSummary;
  const compactions = async (id: string) =>
    (
      await get<{ compactions: { trigger: string; summary: string }[] }>(
        `/sessions/${id}/compactions`,
      )
    ).compactions;

  async function chat(turn: number, sessionId?: string): Promise<Envelope> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: userText(turn), ...(sessionId ? { sessionId } : {}) },
    });
    expect(res.statusCode, res.body).toBe(200);
    return res.json<Envelope>();
  }

  /** cairn_compactions_total{trigger="background",outcome="ok"} as /metrics shows it now. */
  async function backgroundCompactionsCounted(): Promise<number> {
    const metrics = (await t.app.server.inject({ method: 'GET', url: '/metrics' })).body;
    const line = /^cairn_compactions_total\{[^}]*trigger="background"[^}]*\} (\d+)$/m.exec(metrics);
    return Number(line?.[1] ?? 0);
  }

  /** Cairn's count of the last agent request's prompt, as a share of the window. */
  const lastShare = () =>
    estimateMessagesTokens(agentRequestsOf(t.fake!).at(-1)!.body.messages) / WINDOW;

  it('turns past prepareAt and autoThreshold do not wait; the turn that would overflow waits for that one summary', async () => {
    let turn = 0;
    const first = await chat(turn++);
    const id = first.sessionId;
    while (summaryRequestsOf(t.fake!).length === 0) {
      expect(turn, 'a summary is prepared once the prompt passes prepareAt').toBeLessThan(20);
      expect((await chat(turn++, id)).compaction).toBeNull();
    }
    // Asked after a turn's reply, below the threshold: the turn did not wait for it.
    expect(lastShare()).toBeLessThan(AUTO_THRESHOLD / 100);
    expect(await prepared(id)).toMatchObject({ status: 'preparing', messages: null });

    // Past autoThreshold, while the summariser still works: no turn waits.
    let passedThreshold = false;
    let waited: Envelope | undefined;
    while (!waited) {
      expect(turn, 'the window fills up').toBeLessThan(40);
      const envelope = await chat(turn++, id);
      if (envelope.compaction) waited = envelope;
      else {
        expect(await compactions(id)).toEqual([]);
        if (lastShare() >= AUTO_THRESHOLD / 100) passedThreshold = true;
      }
    }
    expect(passedThreshold).toBe(true);
    // The turn that could not fit waited for the summary being prepared, not a second one.
    expect(waited.compaction?.trigger).toBe('background');
    expect(summaryRequestsOf(t.fake!)).toHaveLength(1);
    const landed = await compactions(id);
    expect(landed.map((c) => [c.trigger, c.summary])).toEqual([['background', 'SUMMARY-1']]);
    // Every request fit the window, by Cairn's count.
    for (const request of agentRequestsOf(t.fake!))
      expect(estimateMessagesTokens(request.body.messages)).toBeLessThanOrEqual(WINDOW);
    for (const request of t.fake!.requests) expect(request.problems).toEqual([]);
    expect((await prepared(id))?.status ?? 'none').not.toBe('outdated');
  });

  it('a ready summary lands at the next turn start, announced, counted and recorded as background', async () => {
    let turn = 0;
    const id = (await chat(turn++)).sessionId;
    while (summaryRequestsOf(t.fake!).length === 0) {
      expect(turn).toBeLessThan(20);
      await chat(turn++, id);
    }
    // Nobody chats while it is computed: it waits, ready, for the next turn.
    let view = await prepared(id);
    for (let i = 0; view?.status !== 'ready'; i++) {
      expect(i, 'the prepared summary becomes ready').toBeLessThan(200);
      await new Promise((resolve) => setTimeout(resolve, 50));
      view = await prepared(id);
    }
    expect(view.messages).toBeGreaterThan(0);
    const folded = view.messages;

    const countedBefore = await backgroundCompactionsCounted();
    const next = await chat(turn++, id);
    expect(next.compaction).toMatchObject({
      trigger: 'background',
      runs: 1,
      compactedCount: folded,
    });
    // The turn's request was built on the landed summary.
    const request = agentRequestsOf(t.fake!).at(-1)!;
    expect(JSON.stringify(request.body.messages)).toContain('SUMMARY-1');
    expect(await compactions(id)).toMatchObject([{ trigger: 'background', summary: 'SUMMARY-1' }]);
    // The landed one is gone; one prepared next is for the new pointer.
    expect((await prepared(id))?.status ?? 'none').not.toBe('outdated');

    const events = (
      await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 1_000 })
    ).filter((e) => e.type.startsWith('context.'));
    // Said before the summary call, then once landed (a next preparation may follow).
    expect(events.slice(0, 2).map((e) => [e.type, e.data['trigger']])).toEqual([
      ['context.compacting', 'background'],
      ['context.defaultCompacted', 'background'],
    ]);
    expect(await backgroundCompactionsCounted()).toBe(countedBefore + 1);
  });
});

describe('prepareAt in agent.json', () => {
  function problemsOf(defaultCompaction: Record<string, unknown>) {
    const dir = mkdtempSync(path.join(tmpdir(), 'cairn-prepare-'));
    try {
      mkdirSync(path.join(dir, 'assistant'));
      writeFileSync(
        path.join(dir, 'assistant', 'agent.json'),
        JSON.stringify({ ...TEST_AGENT, defaultCompaction }),
      );
      const loaded = loadAgents(dir);
      return {
        problems: loaded.problems.map((p) => [p.pointer, p.message]),
        agent: loaded.agents[0],
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('must be below autoThreshold, 0 or a percent; 60 when absent, off under a low threshold', () => {
    expect(problemsOf({ prepareAt: 80 }).problems).toEqual([
      ['/defaultCompaction/prepareAt', expect.stringContaining('must be below autoThreshold (80)')],
    ]);
    expect(problemsOf({ prepareAt: 0.5 }).problems).toEqual([
      [
        '/defaultCompaction/prepareAt',
        'must be 0 (no summary prepared in the background) or a percent from 1 to 99',
      ],
    ]);
    expect(problemsOf({}).agent?.defaultCompaction.prepareAt).toBe(60);
    expect(problemsOf({ autoThreshold: 50 }).agent?.defaultCompaction.prepareAt).toBe(0);
    expect(problemsOf({ autoThreshold: 0, prepareAt: 30 }).agent?.defaultCompaction.prepareAt).toBe(
      0,
    );
    expect(problemsOf({ prepareAt: 0 }).agent?.defaultCompaction.prepareAt).toBe(0);
  });
});
