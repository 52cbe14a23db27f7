/**
 * POST /sessions/:id/fork on the real app (SQLite file and Postgres database),
 * with the fake model behind it: the fork holds the history up to `atSeq`
 * and no more, the model sees exactly that history on the fork's next turn,
 * the compaction state comes along only when `atSeq` is past the pointer,
 * and bad fork points are stable errors that write nothing.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import { DATABASES, seedSession, startTestApp, type TestApp } from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest } from '../compaction/summary-requests.js';

interface SessionBody {
  id: string;
  mode: string;
  message_count: number;
  last_seq: number;
  compact_summary: string | null;
  compact_seq: number;
}

function turns(count: number): ChatMessage[] {
  return Array.from({ length: count * 2 }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: `${i % 2 === 0 ? 'question' : 'answer'} ${Math.floor(i / 2) + 1}`,
  }));
}

describe.each(DATABASES)('POST /sessions/:id/fork (%s)', (database) => {
  let t: TestApp;
  const fake = () => t.fake!;

  beforeAll(async () => {
    t = await startTestApp({ database });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setDefault((b) =>
      isSummaryRequest(b) ? { content: 'SUMMARY OF THE START' } : { content: 'ok' },
    );
  });

  function fork(id: string, payload?: unknown) {
    return t.app.server.inject({
      method: 'POST',
      url: `/sessions/${id}/fork`,
      ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
    });
  }

  async function chat(id: string, message: string) {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message, sessionId: id },
    });
    expect(res.statusCode, res.body).toBe(200);
  }

  async function sessionCount(): Promise<number> {
    return (await t.app.store.listSessions({ limit: 500 })).items.length;
  }

  it('the fork holds the history up to atSeq, and its next turn sends the model only that', async () => {
    // seq 1 system, 2-7: question 1, answer 1, question 2, answer 2, question 3, answer 3.
    const parent = await seedSession(t.app, turns(3));
    const res = await fork(parent, { atSeq: 5 });
    expect(res.statusCode, res.body).toBe(201);
    const { session, forkedFrom } = res.json<{
      session: SessionBody;
      forkedFrom: { sessionId: string; atSeq: number };
    }>();
    expect(forkedFrom).toEqual({ sessionId: parent, atSeq: 5 });
    expect(session).toMatchObject({ mode: 'chat', message_count: 5, last_seq: 5 });

    await chat(session.id, 'question 3, asked differently');
    const sent = agentRequestsOf(fake())[0]!.body.messages.map(
      (m: { content: string }) => m.content,
    );
    expect(sent).toEqual([
      'You are a test assistant.',
      'question 1',
      'answer 1',
      'question 2',
      'answer 2',
      'question 3, asked differently',
    ]);
    // The parent is untouched.
    const parentMessages = await t.app.store.listMessages(parent, { afterSeq: 0, limit: 100 });
    expect(parentMessages.map((m) => m.content).slice(-1)).toEqual(['answer 3']);

    const events = await t.app.store.listEvents({ afterId: 0, sessionId: session.id, limit: 10 });
    expect(events.find((e) => e.type === 'session.created')?.data).toMatchObject({
      forkedFrom: { sessionId: parent, atSeq: 5 },
    });
  });

  it('without atSeq the fork holds the whole history', async () => {
    const parent = await seedSession(t.app, turns(2));
    const res = await fork(parent);
    expect(res.statusCode, res.body).toBe(201);
    expect(res.json().session).toMatchObject({ message_count: 5, last_seq: 5 });
    const empty = await t.app.server.inject({
      method: 'POST',
      url: `/sessions/${parent}/fork`,
      payload: {},
    });
    expect(empty.json().session.last_seq).toBe(5);
  });

  it('past the compaction pointer the fork keeps the summary; before it, raw messages only', async () => {
    const parent = await seedSession(t.app, turns(4));
    const compacted = await t.app.server.inject({
      method: 'POST',
      url: `/sessions/${parent}/compact`,
    });
    expect(compacted.statusCode, compacted.body).toBe(200);
    const pointer = (await t.app.store.findSession(parent))!.compact_seq;
    expect(pointer).toBeGreaterThan(2);

    const past = (await fork(parent, { atSeq: pointer + 1 })).json<{ session: SessionBody }>()
      .session;
    expect(past).toMatchObject({ compact_summary: 'SUMMARY OF THE START', compact_seq: pointer });
    fake().reset();
    await chat(past.id, 'go on');
    const pastSent = JSON.stringify(agentRequestsOf(fake())[0]!.body.messages);
    expect(pastSent).toContain(SUMMARY_PREFIX.trim());
    expect(pastSent).not.toContain('"question 1"');

    const before = (await fork(parent, { atSeq: pointer - 1 })).json<{ session: SessionBody }>()
      .session;
    expect(before).toMatchObject({
      compact_summary: null,
      compact_seq: 0,
      message_count: pointer - 1,
    });
    fake().reset();
    await chat(before.id, 'go on');
    const beforeSent = agentRequestsOf(fake())[0]!.body.messages;
    expect(JSON.stringify(beforeSent)).not.toContain('SUMMARY OF THE START');
    expect(beforeSent[1].content).toBe('question 1');
    expect(beforeSent).toHaveLength(pointer - 1 + 1);
  });

  it('a fork point that is not a message is 404 MESSAGE_NOT_FOUND; a malformed one 400; nothing is written', async () => {
    const parent = await seedSession(t.app, turns(1));
    const count = await sessionCount();
    const missing = await fork(parent, { atSeq: 99 });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('MESSAGE_NOT_FOUND');
    expect(missing.json().error.message).toContain('GET /sessions/');
    for (const atSeq of [0, -1, 1.5, 'two']) {
      const bad = await fork(parent, { atSeq });
      expect(bad.statusCode, JSON.stringify(atSeq)).toBe(400);
      expect(bad.json().error.code).toBe('VALIDATION_ERROR');
    }
    const extra = await fork(parent, { atSeq: 2, messages: [] });
    expect(extra.statusCode).toBe(400);
    const unknown = await fork('sess_000000000000000000000000', { atSeq: 1 });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('SESSION_NOT_FOUND');
    expect(await sessionCount()).toBe(count);
  });
});
