/**
 * defaultCompaction over HTTP, through the real app, a real SQLite file and the
 * scripted fake model: the endpoint and its response, what the summariser is
 * asked, what the next chat sends, dry run, instructions, undo, the compaction
 * history, the context endpoint, compactCount on session creation, the edge
 * cases (nothing to compact, empty summary, closed or missing session, old
 * rows), reset, and the `context.defaultCompacted` event.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import type { PgStore } from '../../src/store/postgres/pg-store.js';
import type { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import {
  DATABASES,
  PATIENT_MS,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const CONTEXT_WINDOW = 8_192;
const SYSTEM_PROMPT = TEST_AGENT.system;
/** max_tokens of a summary call: the default maxSummaryChars (12 000) at 3 characters a token. */
const SUMMARY_MAX_TOKENS = 4_000;
const UNKNOWN_SESSION = 'sess_000000000000000000000000';

interface Session {
  id: string;
  status: string;
  message_count: number;
  compact_summary: string | null;
  compact_size: number;
  compact_count: number;
  compaction_count: number;
  compact_seq: number;
  updated_at: string;
}

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: unknown[];
  tool_call_id?: string;
}

/** `m<i>:` padded to `size` characters with a word unique to the message. */
function body(i: number, size: number): string {
  const head = `m${i}: word${i}xyz `;
  return head + '.'.repeat(Math.max(0, size - head.length));
}

/** Alternating user / assistant messages with the given sizes. */
function conversation(sizes: readonly number[]): ChatMessage[] {
  return sizes.map((size, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: body(i, size),
  }));
}

/** An UPDATE outside the store, with one `$1` parameter, on either dialect. */
async function rawUpdate(store: Store, sql: string, param: string): Promise<void> {
  if (store.kind === 'postgres') await (store as PgStore).pool.query(sql, [param]);
  else (store as SqliteStore).db.prepare(sql.replace('$1', '?')).run(param);
}

describe.each(DATABASES)('defaultCompaction API (%s)', (database) => {
  let t: TestApp;
  /** Summaries the fake model returns for summary calls, in order ('SUMMARY' when empty). */
  let summaries: string[];

  const fake = () => t.fake!;
  const summaryRequests = () => summaryRequestsOf(fake());
  const chatRequests = () => agentRequestsOf(fake());

  beforeAll(async () => {
    t = await startTestApp({
      database,
      mainModel: { contextWindow: CONTEXT_WINDOW, timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    summaries = [];
    fake().setDefault((b) =>
      isSummaryRequest(b) ? { content: summaries.shift() ?? 'SUMMARY' } : { content: 'ok' },
    );
  });

  async function post(url: string, payload?: unknown, headers?: Record<string, string>) {
    return t.app.server.inject({
      method: 'POST',
      url,
      ...(payload !== undefined ? { payload: payload as string } : {}),
      ...(headers ? { headers } : {}),
    });
  }

  async function createSession(extra: Record<string, unknown> = {}): Promise<Session> {
    const res = await post('/sessions', { agentName: 'assistant', ...extra });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().session as Session;
  }

  /** A session holding `messages` after its system prompt (seq 2, 3, …). */
  async function seeded(messages: ChatMessage[], extra: Record<string, unknown> = {}) {
    const session = await createSession(extra);
    await t.app.store.appendMessages(session.id, messages);
    return session.id;
  }

  async function getSession(id: string): Promise<Session> {
    const res = await t.app.server.inject({ url: `/sessions/${id}` });
    expect(res.statusCode).toBe(200);
    return res.json().session as Session;
  }

  async function listMessages(id: string) {
    const res = await t.app.server.inject({ url: `/sessions/${id}/messages?limit=1000` });
    expect(res.statusCode).toBe(200);
    return res.json().messages as (WireMessage & { seq: number; compacted: boolean })[];
  }

  async function listCompactions(id: string) {
    const res = await t.app.server.inject({ url: `/sessions/${id}/compactions` });
    expect(res.statusCode).toBe(200);
    return res.json().compactions as Record<string, unknown>[];
  }

  async function compact(id: string, payload?: unknown) {
    return post(`/sessions/${id}/compact`, payload);
  }

  async function chat(id: string, message: string) {
    const res = await post('/agents/assistant/chat', { message, sessionId: id });
    expect(res.statusCode, res.body).toBe(200);
    return res.json();
  }

  /** Everything a failed compaction must leave untouched. */
  async function snapshot(id: string) {
    return {
      session: await getSession(id),
      messages: await listMessages(id),
      compactions: await listCompactions(id),
    };
  }

  function expectError(
    res: { statusCode: number; json: () => unknown },
    status: number,
    code: string,
  ) {
    expect(res.statusCode).toBe(status);
    expect(res.json()).toEqual({ error: { code, message: expect.any(String) } });
  }

  function expectAllAccepted(): void {
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  }

  // 12 messages of 200 characters: compactCount 50 covers the first 6 (seq 2–7).
  const TWELVE = () => conversation(Array<number>(12).fill(200));

  describe('POST /sessions/:id/compact, as in the report', () => {
    it.each([
      ['no body', undefined, undefined],
      ['an empty JSON body', '', { 'content-type': 'application/json' }],
      ['{}', {}, undefined],
    ] as const)(
      'with %s: compacts by length and returns the documented shape',
      async (_, payload, headers) => {
        const id = await seeded(TWELVE());
        summaries.push('SUMMARY-1');
        const res = await post(`/sessions/${id}/compact`, payload, headers);
        expect(res.statusCode, res.body).toBe(200);
        const report = res.json();
        expect(Object.keys(report).sort()).toEqual([
          'alreadyUpToDate',
          'compactedCount',
          'newSize',
          'session',
          'sessionId',
        ]);
        expect(report).toMatchObject({
          sessionId: id,
          compactedCount: 6,
          newSize: 6,
          alreadyUpToDate: false,
          session: {
            id,
            compact_summary: 'SUMMARY-1',
            compact_size: 6,
            compact_seq: 7,
            compaction_count: 1,
          },
        });
        expect(await getSession(id)).toEqual(report.session);
        expect(summaryRequests()).toHaveLength(1);
        expectAllAccepted();
      },
    );

    it('keeps every message in the database, flagging exactly the covered ones as compacted', async () => {
      const id = await seeded(TWELVE());
      expect((await compact(id)).statusCode).toBe(200);
      const messages = await listMessages(id);
      expect(messages).toHaveLength(13);
      expect(messages.map((m) => m.seq)).toEqual(Array.from({ length: 13 }, (_, i) => i + 1));
      expect(messages.map((m) => m.compacted)).toEqual([
        false, // the system prompt is never compacted
        ...Array<boolean>(6).fill(true),
        ...Array<boolean>(6).fill(false),
      ]);
      expect(messages.slice(1).map((m) => m.content)).toEqual(TWELVE().map((m) => m.content));
    });

    it('the next chat sends system, the summary, the acknowledgement, then only the tail', async () => {
      const id = await seeded(TWELVE());
      summaries.push('Goals: test. Facts: word0xyz.');
      expect((await compact(id)).statusCode).toBe(200);
      fake().requests.length = 0;
      await chat(id, 'next question');
      const [request] = chatRequests();
      const sent = request!.body.messages as WireMessage[];
      expect(sent).toEqual([
        { role: 'system', content: SYSTEM_PROMPT },
        { role: 'user', content: `${SUMMARY_PREFIX}Goals: test. Facts: word0xyz.` },
        { role: 'assistant', content: SUMMARY_ACK },
        ...TWELVE()
          .slice(6)
          .map((m) => ({ role: m.role, content: m.content })),
        { role: 'user', content: 'next question' },
      ]);
      expectAllAccepted();
    });

    it('leaves the acknowledgement out when the tail starts with an assistant message', async () => {
      // 10 × 200: the first 5 are compacted, so the tail starts with message 5 (assistant).
      const id = await seeded(conversation(Array<number>(10).fill(200)));
      expect((await compact(id)).json().compactedCount).toBe(5);
      fake().requests.length = 0;
      await chat(id, 'next question');
      const sent = chatRequests()[0]!.body.messages as WireMessage[];
      expect(sent.map((m) => m.role)).toEqual([
        'system',
        'user',
        'assistant',
        'user',
        'assistant',
        'user',
        'assistant',
        'user',
      ]);
      expect(sent[1]!.content).toBe(`${SUMMARY_PREFIX}SUMMARY`);
      expect(sent[2]!.content).toBe(body(5, 200));
      expect(sent.some((m) => m.content === SUMMARY_ACK)).toBe(false);
      expectAllAccepted();
    });

    it('asks the summariser without tools, with max_tokens, the batch, and then the previous summary', async () => {
      const id = await seeded(TWELVE());
      summaries.push('SUMMARY-ONE', 'SUMMARY-TWO');
      expect((await compact(id)).statusCode).toBe(200);
      const first = summaryRequests()[0]!.body;
      expect(first.tools).toBeUndefined();
      expect(first.tool_choice).toBeUndefined();
      expect(first.max_tokens).toBe(SUMMARY_MAX_TOKENS);
      expect(first.messages).toHaveLength(2);
      expect(first.messages[0].role).toBe('system');
      const prompt = first.messages[1].content as string;
      for (let i = 0; i < 6; i++) expect(prompt).toContain(`word${i}xyz`);
      for (let i = 6; i < 12; i++) expect(prompt).not.toContain(`word${i}xyz`);
      // No summary yet: the summariser gets the empty sections to fill in.
      expect(prompt).toContain(
        'Existing summary:\n## Goal\n- none\n\n## Instructions and preferences',
      );

      expect((await compact(id)).statusCode).toBe(200);
      const second = summaryRequests()[1]!.body;
      expect(second.tools).toBeUndefined();
      const prompt2 = second.messages[1].content as string;
      expect(prompt2).toContain('SUMMARY-ONE');
      expect(prompt2).not.toContain('word0xyz'); // already covered by the summary
      expect(prompt2).toContain('word6xyz');
      expect((await getSession(id)).compact_summary).toBe('SUMMARY-TWO');
      expectAllAccepted();
    });

    it('a second call with a shorter summary compacts half of what remains', async () => {
      // 100 messages of 100 characters; the first call covers 50 (5 000 characters).
      const id = await seeded(conversation(Array<number>(100).fill(100)));
      summaries.push('s'.repeat(500));
      expect((await compact(id)).json()).toMatchObject({ compactedCount: 50, newSize: 50 });
      // total = 500 + 50 × 100 = 5 500; target 2 750 → 28 messages.
      const res = await compact(id);
      expect(res.json()).toMatchObject({ compactedCount: 28, newSize: 78 });
      expect(res.json().session.compact_seq).toBe(79);
    });
  });

  describe('a batch larger than the summariser’s input budget', () => {
    // Budget with an 8 192-token window and maxSummaryChars 12 000:
    // (8 192 − 4 000 − 1 500) × 3 = 8 076 characters of transcript.
    it('compacts a shorter prefix that fits, still tool-safe, and the rest later', async () => {
      const big = (i: number, role: 'user' | 'assistant'): ChatMessage => ({
        role,
        content: body(i, 2_000),
      });
      const id = await seeded([
        big(0, 'user'),
        big(1, 'assistant'),
        big(2, 'user'),
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_budget',
              type: 'function',
              function: { name: 'current_time', arguments: JSON.stringify({ q: 'q'.repeat(90) }) },
            },
          ],
        },
        {
          role: 'tool',
          tool_call_id: 'call_budget',
          name: 'current_time',
          content: 'r'.repeat(1_900),
        },
        big(5, 'user'),
        big(6, 'assistant'),
        big(7, 'user'),
        big(8, 'assistant'),
      ]);
      // The plan covers the tool exchange (5 messages, ~8 000 characters), but only the first
      // three fit the budget with the call, and the call cannot go without its result: the cut
      // moves back before the call. The dry run reports exactly what the real run does.
      const dry = (await compact(id, { dryRun: true })).json();
      expect(dry).toMatchObject({ dryRun: true, compactedCount: 3, newSize: 3 });
      const res = await compact(id);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({ compactedCount: 3, newSize: 3 });
      const prompt = summaryRequests()[0]!.body.messages[1].content as string;
      expect(prompt).toContain('word2xyz');
      expect(prompt).not.toContain('call_budget');
      expect(prompt).not.toContain('current_time');

      // The next request starts the tail at the call, with its result right after.
      await chat(id, 'go on');
      const sent = chatRequests().at(-1)!.body.messages as WireMessage[];
      expect(sent.map((m) => m.role).slice(0, 5)).toEqual([
        'system',
        'user',
        'assistant',
        'tool',
        'user',
      ]);

      // The next compaction picks up at the call.
      const next = await compact(id);
      expect(next.json().newSize).toBeGreaterThan(3);
      expect(summaryRequests()[1]!.body.messages[1].content).toContain('called current_time(');
      expect((await listCompactions(id))[1]).toMatchObject({ from_size: 3 });
      expectAllAccepted();
    });
  });

  describe('dry run and instructions', () => {
    it('{dryRun:true} reports the cut without calling the model or changing anything', async () => {
      const id = await seeded(TWELVE());
      const before = await snapshot(id);
      const res = await compact(id, { dryRun: true });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        sessionId: id,
        dryRun: true,
        compactedCount: 6,
        newSize: 6,
        batchChars: 1_200,
        totalChars: 2_400,
      });
      expect(fake().requests).toHaveLength(0);
      expect(await snapshot(id)).toEqual(before);
      // {dryRun:false} is a real compaction.
      expect((await compact(id, { dryRun: false })).json().compactedCount).toBe(6);
    });

    it('{instructions} are added to the summary prompt', async () => {
      const id = await seeded(TWELVE());
      const res = await compact(id, { instructions: 'focus on the invoice numbers' });
      expect(res.statusCode).toBe(200);
      const prompt = summaryRequests()[0]!.body.messages[1].content as string;
      expect(prompt).toContain('focus on the invoice numbers');
      const plain = await seeded(TWELVE());
      await compact(plain);
      expect(summaryRequests()[1]!.body.messages[1].content).not.toContain('invoice');
    });

    it('rejects unknown fields and wrong types with 400 and calls no model', async () => {
      const id = await seeded(TWELVE());
      const before = await snapshot(id);
      for (const payload of [
        { force: true },
        { dryRun: 'yes' },
        { dryRun: 1 },
        { instructions: '' },
        { instructions: 5 },
        [],
        42,
      ]) {
        expectError(await compact(id, payload), 400, 'VALIDATION_ERROR');
      }
      expect(fake().requests).toHaveLength(0);
      expect(await snapshot(id)).toEqual(before);
    });
  });

  describe('undo and the history of compactions', () => {
    it('undo restores the previous summary and pointer; a second undo is a 409 COMPACTION_CONFLICT', async () => {
      const id = await seeded(TWELVE());
      expectError(await post(`/sessions/${id}/compact/undo`), 409, 'COMPACTION_CONFLICT');
      summaries.push('FIRST', 'SECOND');
      const first = (await compact(id)).json().session as Session;
      const second = (await compact(id)).json().session as Session;
      expect(second.compact_size).toBeGreaterThan(first.compact_size);

      const res = await post(`/sessions/${id}/compact/undo`);
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toMatchObject({
        sessionId: id,
        restoredSize: first.compact_size,
        session: {
          compact_summary: 'FIRST',
          compact_size: first.compact_size,
          compact_seq: first.compact_seq,
          compaction_count: 1,
        },
      });
      const afterUndo = await snapshot(id);
      expect(afterUndo.session).toEqual(res.json().session);
      expect(afterUndo.messages.filter((m) => m.compacted)).toHaveLength(first.compact_size);
      const rows = afterUndo.compactions;
      expect(rows).toHaveLength(2);
      expect(rows[0]!.undone_at).toBeNull();
      expect(rows[1]!.undone_at).toEqual(expect.any(String));

      expectError(await post(`/sessions/${id}/compact/undo`), 409, 'COMPACTION_CONFLICT');
      expect(await snapshot(id)).toEqual(afterUndo);

      // The next chat gets the restored summary and tail.
      fake().requests.length = 0;
      await chat(id, 'after undo');
      const sent = chatRequests()[0]!.body.messages as WireMessage[];
      expect(sent[1]).toEqual({ role: 'user', content: `${SUMMARY_PREFIX}FIRST` });
      expect(sent[3]!.content).toBe(body(6, 200));
    });

    it('undo of the only compaction restores the uncompacted session', async () => {
      const id = await seeded(TWELVE());
      await compact(id);
      const res = await post(`/sessions/${id}/compact/undo`);
      expect(res.json()).toMatchObject({
        restoredSize: 0,
        session: { compact_summary: null, compact_size: 0, compact_seq: 0, compaction_count: 0 },
      });
      expectError(
        await post(`/sessions/${UNKNOWN_SESSION}/compact/undo`),
        404,
        'SESSION_NOT_FOUND',
      );
    });

    it('GET /sessions/:id/compactions lists each compaction with its sizes, summary, trigger and model', async () => {
      const id = await seeded(TWELVE());
      expect(await listCompactions(id)).toEqual([]);
      summaries.push('FIRST SUMMARY', 'SECOND');
      await compact(id);
      await compact(id);
      const rows = await listCompactions(id);
      expect(rows).toHaveLength(2);
      expect(rows[0]).toMatchObject({
        session_id: id,
        from_size: 0,
        to_size: 6,
        summary: 'FIRST SUMMARY',
        trigger: 'manual',
        model: 'test-model',
        summary_chars: 'FIRST SUMMARY'.length,
      });
      expect(rows[1]).toMatchObject({
        from_size: 6,
        to_size: (await getSession(id)).compact_size,
        summary: 'SECOND',
        trigger: 'manual',
        summary_chars: 6,
      });
      // input_chars measures the batch as the summariser got it: at least the 1 200 characters
      // of the six messages, at most the whole prompt.
      const prompt = summaryRequests()[0]!.body.messages[1].content as string;
      expect(rows[0]!.input_chars).toBeGreaterThanOrEqual(1_200);
      expect(rows[0]!.input_chars).toBeLessThan(prompt.length);
      expect(rows[0]!.created_at).toEqual(expect.any(String));
      expectError(
        await t.app.server.inject({ url: `/sessions/${UNKNOWN_SESSION}/compactions` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });

  describe('GET /sessions/:id/context', () => {
    it('is exactly what the next model call sends, and its tokens add up', async () => {
      const id = await seeded([
        ...TWELVE(),
        { role: 'user', content: 'what time is it?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_ctx1',
              type: 'function',
              function: { name: 'current_time', arguments: '{}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: 'call_ctx1', name: 'current_time', content: '12:00' },
        { role: 'assistant', content: 'It is noon.' },
      ]);
      summaries.push('THE SUMMARY');
      expect((await compact(id)).statusCode).toBe(200);

      const res = await t.app.server.inject({ url: `/sessions/${id}/context` });
      expect(res.statusCode).toBe(200);
      const context = res.json();
      fake().requests.length = 0;
      await chat(id, 'the new message');
      const sent = chatRequests()[0]!.body.messages as WireMessage[];
      expect(sent.at(-1)).toEqual({ role: 'user', content: 'the new message' });
      // The wire form of tool results carries no `name`; everything else is identical.
      const withoutName = (context.messages as (WireMessage & { name?: string })[]).map(
        ({ name: _name, ...rest }) => rest,
      );
      expect(withoutName).toEqual(sent.slice(0, -1));
      expect(context.messages[1]).toEqual({
        role: 'user',
        content: `${SUMMARY_PREFIX}THE SUMMARY`,
      });

      const messages = context.messages as ChatMessage[];
      const { tokens } = context;
      expect(context.contextWindow).toBe(CONTEXT_WINDOW);
      expect(tokens.system).toBe(
        estimateMessagesTokens(messages.filter((m) => m.role === 'system')),
      );
      // The tail starts with an assistant message (7 of 16 messages are compacted): no acknowledgement.
      expect(messages[2]).toEqual({ role: 'assistant', content: body(7, 200) });
      expect(tokens.summary).toBe(estimateMessagesTokens(messages.slice(1, 2)));
      expect(tokens.total).toBe(estimateMessagesTokens(messages));
      expect(tokens.system + tokens.summary + tokens.raw).toBe(tokens.total);
      expect(tokens.raw).toBe(estimateMessagesTokens(messages.slice(2)));
      expectAllAccepted();
    });

    it('has no summary tokens before the first compaction', async () => {
      const id = await seeded(TWELVE());
      const context = (await t.app.server.inject({ url: `/sessions/${id}/context` })).json();
      expect(context.messages).toHaveLength(13);
      expect(context.tokens.summary).toBe(0);
      expect(context.tokens.system + context.tokens.raw).toBe(context.tokens.total);
    });
  });

  describe('compactCount on POST /sessions', () => {
    it('stores 33.3 exactly and compacts with it (33 would cut one message fewer)', async () => {
      const id = await seeded(conversation([110, 110, 110, 13, 657]), { compactCount: 33.3 });
      expect((await getSession(id)).compact_count).toBe(33.3);
      const dry = (await compact(id, { dryRun: true })).json();
      expect(dry).toMatchObject({ compactedCount: 4, totalChars: 1_000, batchChars: 343 });
      const truncated = await seeded(conversation([110, 110, 110, 13, 657]), { compactCount: 33 });
      expect((await compact(truncated, { dryRun: true })).json().compactedCount).toBe(3);
    });

    it('rejects 0, 100, a string and null with 400', async () => {
      for (const compactCount of [0, 100, 0.5, 99.5, '50', null]) {
        expectError(
          await post('/sessions', { agentName: 'assistant', compactCount }),
          400,
          'VALIDATION_ERROR',
        );
      }
    });
  });

  describe('edge cases', () => {
    it('a session that never had messages is already up to date, with no model call', async () => {
      const session = await createSession();
      const before = await snapshot(session.id);
      const res = await compact(session.id);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({
        sessionId: session.id,
        compactedCount: 0,
        newSize: 0,
        alreadyUpToDate: true,
        session: before.session,
      });
      expect(fake().requests).toHaveLength(0);
      expect(await snapshot(session.id)).toEqual(before);
    });

    it('a session whose messages are all compacted is already up to date', async () => {
      // compactCount 99 over two messages takes both.
      const id = await seeded(conversation([100, 100]), { compactCount: 99 });
      expect((await compact(id)).json()).toMatchObject({ compactedCount: 2, newSize: 2 });
      fake().requests.length = 0;
      const before = await snapshot(id);
      expect((await compact(id)).json()).toMatchObject({
        compactedCount: 0,
        newSize: 2,
        alreadyUpToDate: true,
      });
      expect(fake().requests).toHaveLength(0);
      expect(await snapshot(id)).toEqual(before);
      // The next chat has the summary and no raw history before the new message.
      await chat(id, 'hello again');
      expect((chatRequests()[0]!.body.messages as WireMessage[]).map((m) => m.role)).toEqual([
        'system',
        'user',
        'assistant',
        'user',
      ]);
    });

    it('all-empty messages (targetLength 0) are already up to date', async () => {
      const id = await seeded([
        { role: 'user', content: '' },
        { role: 'assistant', content: '' },
        { role: 'user', content: '' },
      ]);
      const before = await snapshot(id);
      expect((await compact(id)).json()).toMatchObject({
        compactedCount: 0,
        newSize: 0,
        alreadyUpToDate: true,
      });
      expect(fake().requests).toHaveLength(0);
      expect(await snapshot(id)).toEqual(before);
    });

    it.each([
      ['empty', { content: '' }],
      ['blank', { content: '  \n ' }],
      ['a tool call', { tool_calls: [{ name: 'current_time', arguments: '{}' }] }],
    ])(
      'a summary that is %s is a 500 COMPACTION_EMPTY_SUMMARY and the session stays byte-identical',
      async (_, reply) => {
        const id = await seeded(TWELVE());
        const before = await snapshot(id);
        fake().script(reply);
        const res = await compact(id);
        expectError(res, 500, 'COMPACTION_EMPTY_SUMMARY');
        expect(res.json().error.message).toContain('empty summary');
        expect(res.body).not.toMatch(/ at .*\.(ts|js):\d+/); // no stack trace
        expect(await snapshot(id)).toEqual(before);
        const events = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 100 });
        expect(events.some((e) => e.type === 'context.defaultCompacted')).toBe(false);
      },
    );

    it.each([500, 400])(
      'a model failure (HTTP %i) is a 502 LLM_ERROR and changes nothing',
      async (status) => {
        const id = await seeded(TWELVE());
        const before = await snapshot(id);
        fake().script({ status });
        const res = await compact(id);
        expectError(res, 502, 'LLM_ERROR');
        expect(await snapshot(id)).toEqual(before);
        expect(summaryRequests()).toHaveLength(1); // harness maxRetries 0
      },
    );

    it('a closed session is a 400 SESSION_CLOSED, an unknown one a 404 SESSION_NOT_FOUND', async () => {
      const id = await seeded(TWELVE());
      expect((await post(`/sessions/${id}/close`)).statusCode).toBe(200);
      expectError(await compact(id), 400, 'SESSION_CLOSED');
      expectError(await compact(id, { dryRun: true }), 400, 'SESSION_CLOSED');
      expectError(await compact(UNKNOWN_SESSION), 404, 'SESSION_NOT_FOUND');
      expectError(await compact('not-a-session'), 400, 'VALIDATION_ERROR');
      expect(fake().requests).toHaveLength(0);
      expect((await getSession(id)).compaction_count).toBe(0);
    });

    it('an old session (compaction columns at their defaults, no chars column) gets no injection and compacts normally', async () => {
      const messages = TWELVE();
      const id = await seeded(messages);
      // As a database from before compaction existed left it.
      await rawUpdate(
        t.app.store,
        'UPDATE sessions SET compact_summary = NULL, compact_size = 0, compact_seq = 0, compaction_count = 0 WHERE id = $1',
        id,
      );
      await rawUpdate(t.app.store, 'UPDATE messages SET chars = NULL WHERE session_id = $1', id);

      await chat(id, 'still here?');
      const sent = chatRequests()[0]!.body.messages as WireMessage[];
      expect(sent).toEqual([
        { role: 'system', content: SYSTEM_PROMPT },
        ...messages.map((m) => ({ role: m.role, content: m.content })),
        { role: 'user', content: 'still here?' },
      ]);
      // Sizes measured from the content: 12 × 200 + 11 + 2 ('still here?', 'ok').
      expect((await compact(id, { dryRun: true })).json()).toMatchObject({
        totalChars: 2_413,
        compactedCount: 7,
      });
      expect((await compact(id)).json()).toMatchObject({ compactedCount: 7, newSize: 7 });
    });
  });

  describe('reset and events', () => {
    it('reset clears the summary, pointer and count, and the next request has no summary', async () => {
      const id = await seeded(TWELVE());
      await compact(id);
      const res = await post(`/sessions/${id}/reset`);
      expect(res.statusCode).toBe(200);
      expect(res.json().session).toMatchObject({
        compact_summary: null,
        compact_size: 0,
        compact_seq: 0,
        compaction_count: 0,
      });
      expect(await listCompactions(id)).toEqual([]);
      fake().requests.length = 0;
      await chat(id, 'fresh start');
      expect(chatRequests()[0]!.body.messages).toEqual([
        { role: 'system', content: SYSTEM_PROMPT },
        { role: 'user', content: 'fresh start' },
      ]);
      // And compaction works from scratch: the two new messages, nothing from before.
      const dry = (await compact(id, { dryRun: true })).json();
      expect(dry.totalChars).toBe('fresh start'.length + 'ok'.length);
    });

    it('emits context.defaultCompacted with the documented fields', async () => {
      const id = await seeded(TWELVE());
      summaries.push('EVENT SUMMARY');
      await compact(id);
      await compact(id, { dryRun: true });
      const events = (
        await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 100 })
      ).filter((e) => e.type === 'context.defaultCompacted');
      expect(events).toHaveLength(1); // the dry run emits nothing
      expect(events[0]!.session_id).toBe(id);
      expect(events[0]!.data).toEqual({
        sessionId: id,
        compactedCount: 6,
        newSize: 6,
        summaryChars: 'EVENT SUMMARY'.length,
        trigger: 'manual',
      });
    });
  });
});
