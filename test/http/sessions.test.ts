/**
 * Session resources over HTTP: create, list (filters and keyset pages), read,
 * messages (with the `compacted` flag), reset, close and delete — each with
 * its documented shape and its bad-input answers (400 without coercion,
 * 404 with the right code).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const HELPER_AGENT = {
  name: 'helper',
  description: 'Second test agent',
  system: 'You are the helper.',
  tools: [],
  maxIterations: 3,
  defaultCompaction: { compactionCount: 30 },
};

/** A well-formed session id that no session has. */
const UNKNOWN_SESSION = 'sess_000000000000000000000000';

interface Session {
  id: string;
  agent_name: string;
  mode: string;
  status: string;
  title: string | null;
  parent_session_id: string | null;
  message_count: number;
  compact_count: number;
  compact_seq: number;
}

describe('session routes', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: TEST_AGENT, helper: HELPER_AGENT } });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  async function createSession(body: Record<string, unknown>): Promise<Session> {
    const res = await t.app.server.inject({ method: 'POST', url: '/sessions', payload: body });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().session as Session;
  }

  async function chat(sessionId: string, message: string): Promise<void> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message, sessionId },
    });
    expect(res.statusCode, res.body).toBe(200);
  }

  function expectError(
    res: { statusCode: number; json: () => unknown },
    status: number,
    code: string,
  ): void {
    expect(res.statusCode).toBe(status);
    expect(res.json()).toEqual({ error: { code, message: expect.any(String) } });
  }

  describe('POST /sessions', () => {
    it('creates a chat session with the documented fields and the agent default compactCount', async () => {
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: 'assistant' },
      });
      expect(res.statusCode).toBe(201);
      const { session } = res.json();
      expect(session).toMatchObject({
        id: expect.stringMatching(/^sess_[A-Za-z0-9]+$/),
        agent_name: 'assistant',
        mode: 'chat',
        status: 'active',
        title: null,
        parent_session_id: null,
        created_at: expect.any(String),
        updated_at: expect.any(String),
        message_count: 1, // the system prompt, stored as the first message
        input_tokens: 0,
        output_tokens: 0,
        compact_summary: null,
        compact_size: 0,
        compact_count: 50,
        compaction_count: 0,
        compact_seq: 0,
      });
      expect(Number.isNaN(Date.parse(session.created_at))).toBe(false);
      const helper = await createSession({ agentName: 'helper' });
      expect(helper.compact_count).toBe(30);
    });

    it('keeps the title and a fractional compactCount exactly', async () => {
      const session = await createSession({
        agentName: 'assistant',
        title: 'Trip planning',
        compactCount: 12.5,
      });
      expect(session.title).toBe('Trip planning');
      expect(session.compact_count).toBe(12.5);
      const read = await t.app.server.inject({ url: `/sessions/${session.id}` });
      expect(read.json().session.compact_count).toBe(12.5);
    });

    it('accepts the bounds 1 and 99 for compactCount', async () => {
      expect((await createSession({ agentName: 'assistant', compactCount: 1 })).compact_count).toBe(
        1,
      );
      expect(
        (await createSession({ agentName: 'assistant', compactCount: 99 })).compact_count,
      ).toBe(99);
    });

    it.each([
      ['an unknown field', { agentName: 'assistant', colour: 'red' }],
      ['no agentName', { title: 'x' }],
      ['agentName as a number', { agentName: 123 }],
      ['agentName that is not a valid name', { agentName: 'Not A Name' }],
      ['compactCount as a numeric string', { agentName: 'assistant', compactCount: '50' }],
      ['compactCount 0', { agentName: 'assistant', compactCount: 0 }],
      ['compactCount 100', { agentName: 'assistant', compactCount: 100 }],
      ['compactCount 0.5', { agentName: 'assistant', compactCount: 0.5 }],
      ['compactCount null', { agentName: 'assistant', compactCount: null }],
      ['compactCount as a boolean', { agentName: 'assistant', compactCount: true }],
      ['title as a number', { agentName: 'assistant', title: 7 }],
      ['title over 500 characters', { agentName: 'assistant', title: 't'.repeat(501) }],
    ])('rejects %s with 400 VALIDATION_ERROR', async (_label, payload) => {
      const before = (await t.app.store.listSessions({ limit: 500 })).items.length;
      const res = await t.app.server.inject({ method: 'POST', url: '/sessions', payload });
      expectError(res, 400, 'VALIDATION_ERROR');
      expect((await t.app.store.listSessions({ limit: 500 })).items.length).toBe(before);
    });

    it('names the offending field in the validation message', async () => {
      const extra = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: 'assistant', colour: 'red' },
      });
      expect(extra.json().error.message).toContain('colour');
      const wrongType = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: 'assistant', compactCount: '50' },
      });
      expect(wrongType.json().error.message).toContain('compactCount');
    });

    it.each([
      ['not JSON', '{"agentName":'],
      ['a JSON array', '[{"agentName":"assistant"}]'],
      ['a JSON string', '"assistant"'],
      ['JSON null', 'null'],
      ['empty', ''],
    ])('rejects a body that is %s with 400 VALIDATION_ERROR', async (_label, text) => {
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        headers: { 'content-type': 'application/json' },
        payload: text,
      });
      expectError(res, 400, 'VALIDATION_ERROR');
    });

    it('rejects a form body with 415 and a text body with 400, never parsing either as fields', async () => {
      const form = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        payload: 'agentName=assistant',
      });
      expectError(form, 415, 'UNSUPPORTED_MEDIA_TYPE');
      const text = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        headers: { 'content-type': 'text/plain' },
        payload: '{"agentName":"assistant"}',
      });
      expectError(text, 400, 'VALIDATION_ERROR');
    });

    it('answers 404 AGENT_NOT_FOUND for a well-formed unknown agent', async () => {
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: 'ghost' },
      });
      expectError(res, 404, 'AGENT_NOT_FOUND');
    });
  });

  describe('GET /sessions', () => {
    let listHome: TestApp;
    const ids = { assistant: [] as string[], helper: [] as string[] };
    beforeAll(async () => {
      // A separate home so the counts are exact whatever the other tests create.
      listHome = await startTestApp({
        agents: { assistant: TEST_AGENT, helper: HELPER_AGENT },
        fake: t.fake,
      });
      for (let i = 0; i < 5; i++) {
        for (const agentName of ['assistant', 'helper'] as const) {
          const res = await listHome.app.server.inject({
            method: 'POST',
            url: '/sessions',
            payload: { agentName, title: `${agentName} ${i}` },
          });
          ids[agentName].push(res.json().session.id);
        }
      }
      await listHome.app.server.inject({
        method: 'POST',
        url: `/sessions/${ids.helper[0]}/close`,
      });
    });
    afterAll(async () => listHome.close());

    it('lists sessions newest first with nextCursor null on the last page', async () => {
      const res = await listHome.app.server.inject({ url: '/sessions' });
      expect(res.statusCode).toBe(200);
      const body = res.json();
      expect(Object.keys(body).sort()).toEqual(['nextCursor', 'sessions']);
      expect(body.sessions).toHaveLength(10);
      expect(body.nextCursor).toBeNull();
      const created = body.sessions.map((s: { created_at: string }) => s.created_at);
      expect(created).toEqual([...created].sort().reverse());
    });

    it('filters by agentName, status and mode', async () => {
      const byAgent = (
        await listHome.app.server.inject({ url: '/sessions?agentName=helper' })
      ).json();
      expect(byAgent.sessions.map((s: Session) => s.id).sort()).toEqual([...ids.helper].sort());

      const closed = (await listHome.app.server.inject({ url: '/sessions?status=closed' })).json();
      expect(closed.sessions.map((s: Session) => s.id)).toEqual([ids.helper[0]]);

      const active = (
        await listHome.app.server.inject({ url: '/sessions?status=active&agentName=helper' })
      ).json();
      expect(active.sessions).toHaveLength(4);

      const chats = (await listHome.app.server.inject({ url: '/sessions?mode=chat' })).json();
      expect(chats.sessions).toHaveLength(10);
      const tasks = (await listHome.app.server.inject({ url: '/sessions?mode=task' })).json();
      expect(tasks.sessions).toEqual([]);

      const children = (
        await listHome.app.server.inject({ url: `/sessions?parentSessionId=${ids.assistant[0]}` })
      ).json();
      expect(children).toEqual({ sessions: [], nextCursor: null });
    });

    it("carries each session's first user message, cut to 200 characters, or null", async () => {
      const untitled = await createSession({ agentName: 'assistant' });
      const long = `${'Plan a long trip. '.repeat(20)}The end.`;
      t.fake!.script({ content: 'a1' }, { content: 'a2' });
      await chat(untitled.id, long);
      await chat(untitled.id, 'A second message');
      const empty = await createSession({ agentName: 'assistant' });
      const res = await t.app.server.inject({ url: '/sessions?agentName=assistant&limit=500' });
      expect(res.statusCode).toBe(200);
      const sessions = res.json<{
        sessions: (Session & { first_user_message: string | null; compaction_count: number })[];
      }>().sessions;
      const talked = sessions.find((s) => s.id === untitled.id)!;
      expect(talked.first_user_message).toBe(long.slice(0, 200));
      // The counts a list needs are there too, under their own names.
      expect(talked).toMatchObject({ title: null, message_count: 5, compaction_count: 0 });
      expect(sessions.find((s) => s.id === empty.id)!.first_user_message).toBeNull();
      // Only the list carries it: one session's own answer is the row as stored.
      const one = (await t.app.server.inject({ url: `/sessions/${untitled.id}` })).json();
      expect(one.session).not.toHaveProperty('first_user_message');
    });

    it('pages with limit and cursor without gaps or repeats', async () => {
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const url: string = `/sessions?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const res = await listHome.app.server.inject({ url });
        expect(res.statusCode).toBe(200);
        const body = res.json();
        expect(body.sessions.length).toBeLessThanOrEqual(3);
        seen.push(...body.sessions.map((s: Session) => s.id));
        cursor = body.nextCursor;
        pages += 1;
      } while (cursor !== null && pages < 10);
      expect(pages).toBe(4);
      expect(seen).toHaveLength(10);
      expect(new Set(seen).size).toBe(10);
      expect([...seen].sort()).toEqual([...ids.assistant, ...ids.helper].sort());
    });

    it.each([
      ['limit=0', 'limit=0'],
      ['limit=501', 'limit=501'],
      ['a non-numeric limit', 'limit=ten'],
      ['a fractional limit', 'limit=2.5'],
      ['two limits', 'limit=2&limit=3'],
      ['an unknown status', 'status=open'],
      ['an unknown mode', 'mode=batch'],
      ['a bad agentName', 'agentName=..%2Fx'],
      ['a bad parentSessionId', 'parentSessionId=nope'],
      ['an empty cursor', 'cursor='],
      ['a cursor that was never issued', 'cursor=bm90LWEtY3Vyc29y'],
      ['an unknown parameter', 'sort=asc'],
    ])('rejects %s with 400 VALIDATION_ERROR', async (_label, query) => {
      const res = await listHome.app.server.inject({ url: `/sessions?${query}` });
      expectError(res, 400, 'VALIDATION_ERROR');
    });
  });

  describe('GET /sessions/:id', () => {
    it('returns the session', async () => {
      const created = await createSession({ agentName: 'helper', title: 'one' });
      const res = await t.app.server.inject({ url: `/sessions/${created.id}` });
      expect(res.statusCode).toBe(200);
      expect(res.json()).toEqual({ session: created });
    });

    it('answers 400 for a malformed id and 404 SESSION_NOT_FOUND for an unknown one', async () => {
      expectError(await t.app.server.inject({ url: '/sessions/nope' }), 400, 'VALIDATION_ERROR');
      expectError(
        await t.app.server.inject({ url: '/sessions/sess_bad-chars!' }),
        400,
        'VALIDATION_ERROR',
      );
      expectError(
        await t.app.server.inject({ url: `/sessions/${UNKNOWN_SESSION}` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });

  describe('GET /sessions/:id/messages', () => {
    it('returns the messages in seq order, each with a compacted flag', async () => {
      const session = await createSession({ agentName: 'assistant' });
      t.fake!.script({ content: 'first answer' }, { content: 'second answer' });
      await chat(session.id, 'first question');
      await chat(session.id, 'second question');

      const res = await t.app.server.inject({ url: `/sessions/${session.id}/messages` });
      expect(res.statusCode).toBe(200);
      const { messages } = res.json();
      expect(messages.map((m: { role: string; content: string }) => [m.role, m.content])).toEqual([
        ['system', TEST_AGENT.system],
        ['user', 'first question'],
        ['assistant', 'first answer'],
        ['user', 'second question'],
        ['assistant', 'second answer'],
      ]);
      for (const m of messages) {
        expect(m).toMatchObject({
          session_id: session.id,
          seq: expect.any(Number),
          created_at: expect.any(String),
          compacted: false,
        });
      }
      const seqs = messages.map((m: { seq: number }) => m.seq);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      expect(new Set(seqs).size).toBe(seqs.length);
    });

    it('pages with afterSeq and limit', async () => {
      const session = await createSession({ agentName: 'assistant' });
      t.fake!.script({ content: 'a1' }, { content: 'a2' });
      await chat(session.id, 'q1');
      await chat(session.id, 'q2');
      const all = (await t.app.server.inject({ url: `/sessions/${session.id}/messages` })).json()
        .messages;
      const page = (
        await t.app.server.inject({
          url: `/sessions/${session.id}/messages?afterSeq=${all[1].seq}&limit=2`,
        })
      ).json().messages;
      expect(page).toEqual(all.slice(2, 4));
      const tail = (
        await t.app.server.inject({
          url: `/sessions/${session.id}/messages?afterSeq=${all[4].seq}`,
        })
      ).json().messages;
      expect(tail).toEqual([]);
    });

    it('flags the messages a compaction covers, never the system prompt', async () => {
      const session = await createSession({ agentName: 'assistant' });
      t.fake!.script({ content: 'a1' }, { content: 'a2' });
      await chat(session.id, 'q1');
      await chat(session.id, 'q2');
      const before = (await t.app.server.inject({ url: `/sessions/${session.id}/messages` })).json()
        .messages;
      const firstAnswer = before[2];
      expect(firstAnswer.role).toBe('assistant');
      const committed = await t.app.store.commitCompaction({
        sessionId: session.id,
        expectedSize: 0,
        toSize: 2,
        toSeq: firstAnswer.seq,
        summary: 'The user asked q1 and got a1.',
        trigger: 'manual',
        model: 'test-model',
        inputChars: 4,
      });
      expect(committed).toBeDefined();
      const after = (await t.app.server.inject({ url: `/sessions/${session.id}/messages` })).json()
        .messages;
      expect(after.map((m: { role: string; compacted: boolean }) => [m.role, m.compacted])).toEqual(
        [
          ['system', false],
          ['user', true],
          ['assistant', true],
          ['user', false],
          ['assistant', false],
        ],
      );
    });

    it.each([
      ['afterSeq=-1', 'afterSeq=-1'],
      ['a non-numeric afterSeq', 'afterSeq=first'],
      ['limit=0', 'limit=0'],
      ['limit=1001', 'limit=1001'],
      ['an unknown parameter', 'before=3'],
    ])('rejects %s with 400 VALIDATION_ERROR', async (_label, query) => {
      const session = await createSession({ agentName: 'assistant' });
      const res = await t.app.server.inject({ url: `/sessions/${session.id}/messages?${query}` });
      expectError(res, 400, 'VALIDATION_ERROR');
    });

    it('answers 400 for a malformed id and 404 SESSION_NOT_FOUND for an unknown one', async () => {
      expectError(
        await t.app.server.inject({ url: '/sessions/nope/messages' }),
        400,
        'VALIDATION_ERROR',
      );
      expectError(
        await t.app.server.inject({ url: `/sessions/${UNKNOWN_SESSION}/messages` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });

  describe('POST /sessions/:id/reset', () => {
    it('keeps the system prompt, deletes the conversation and clears counts and compaction state', async () => {
      const session = await createSession({ agentName: 'assistant', compactCount: 40 });
      t.fake!.script({ content: 'a1' }, { content: 'a2' });
      await chat(session.id, 'q1');
      await chat(session.id, 'q2');
      const messages = (
        await t.app.server.inject({ url: `/sessions/${session.id}/messages` })
      ).json().messages;
      await t.app.store.commitCompaction({
        sessionId: session.id,
        expectedSize: 0,
        toSize: 2,
        toSeq: messages[2].seq,
        summary: 'summary',
        trigger: 'manual',
        model: 'test-model',
        inputChars: 4,
      });

      const res = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${session.id}/reset`,
      });
      expect(res.statusCode).toBe(200);
      expect(res.json().session).toMatchObject({
        id: session.id,
        status: 'active',
        message_count: 1,
        input_tokens: 0,
        output_tokens: 0,
        compact_summary: null,
        compact_size: 0,
        compact_seq: 0,
        compaction_count: 0,
        compact_count: 40,
      });
      const left = (await t.app.server.inject({ url: `/sessions/${session.id}/messages` })).json()
        .messages;
      expect(left.map((m: { role: string }) => m.role)).toEqual(['system']);

      // The session is usable again and the model sees only the system prompt and the new message.
      t.fake!.script({ content: 'fresh' });
      await chat(session.id, 'again');
      const sent = t.fake!.requests.at(-1)!.body.messages;
      expect(sent.map((m: { role: string }) => m.role)).toEqual(['system', 'user']);
    });

    it('accepts an empty JSON object but rejects unknown body fields', async () => {
      const session = await createSession({ agentName: 'assistant' });
      const ok = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${session.id}/reset`,
        payload: {},
      });
      expect(ok.statusCode).toBe(200);
      const bad = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${session.id}/reset`,
        payload: { hard: true },
      });
      expectError(bad, 400, 'VALIDATION_ERROR');
    });

    it('answers 400 for a malformed id and 404 SESSION_NOT_FOUND for an unknown one', async () => {
      expectError(
        await t.app.server.inject({ method: 'POST', url: '/sessions/nope/reset' }),
        400,
        'VALIDATION_ERROR',
      );
      expectError(
        await t.app.server.inject({ method: 'POST', url: `/sessions/${UNKNOWN_SESSION}/reset` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });

  describe('POST /sessions/:id/close', () => {
    it('closes the session; chatting on it is 400 SESSION_CLOSED and nothing reaches the model', async () => {
      const session = await createSession({ agentName: 'assistant' });
      const res = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${session.id}/close`,
      });
      expect(res.statusCode).toBe(200);
      expect(res.json().session).toMatchObject({ id: session.id, status: 'closed' });

      const chatRes = await t.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: 'hello?', sessionId: session.id },
      });
      expectError(chatRes, 400, 'SESSION_CLOSED');
      expect(t.fake!.requests).toHaveLength(0);
      const messages = (
        await t.app.server.inject({ url: `/sessions/${session.id}/messages` })
      ).json().messages;
      expect(messages.map((m: { role: string }) => m.role)).toEqual(['system']);
    });

    it('rejects unknown body fields', async () => {
      const session = await createSession({ agentName: 'assistant' });
      const res = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${session.id}/close`,
        payload: { reason: 'done' },
      });
      expectError(res, 400, 'VALIDATION_ERROR');
      const read = await t.app.server.inject({ url: `/sessions/${session.id}` });
      expect(read.json().session.status).toBe('active');
    });

    it('answers 400 for a malformed id and 404 SESSION_NOT_FOUND for an unknown one', async () => {
      expectError(
        await t.app.server.inject({ method: 'POST', url: '/sessions/nope/close' }),
        400,
        'VALIDATION_ERROR',
      );
      expectError(
        await t.app.server.inject({ method: 'POST', url: `/sessions/${UNKNOWN_SESSION}/close` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });

  describe('DELETE /sessions/:id', () => {
    it('rejects unknown body fields and keeps the session', async () => {
      const session = await createSession({ agentName: 'assistant' });
      const res = await t.app.server.inject({
        method: 'DELETE',
        url: `/sessions/${session.id}`,
        payload: { cascade: true },
      });
      expectError(res, 400, 'VALIDATION_ERROR');
      expect((await t.app.server.inject({ url: `/sessions/${session.id}` })).statusCode).toBe(200);
    });

    it('deletes the session and its messages with 204; it is then 404', async () => {
      const session = await createSession({ agentName: 'assistant' });
      t.fake!.script({ content: 'a1' });
      await chat(session.id, 'q1');
      const res = await t.app.server.inject({ method: 'DELETE', url: `/sessions/${session.id}` });
      expect(res.statusCode).toBe(204);
      expect(res.body).toBe('');
      expectError(
        await t.app.server.inject({ url: `/sessions/${session.id}` }),
        404,
        'SESSION_NOT_FOUND',
      );
      expectError(
        await t.app.server.inject({ url: `/sessions/${session.id}/messages` }),
        404,
        'SESSION_NOT_FOUND',
      );
      expect(await t.app.store.listMessages(session.id, { afterSeq: 0, limit: 100 })).toEqual([]);
      expectError(
        await t.app.server.inject({ method: 'DELETE', url: `/sessions/${session.id}` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });

    it('answers 400 for a malformed id and 404 SESSION_NOT_FOUND for an unknown one', async () => {
      expectError(
        await t.app.server.inject({ method: 'DELETE', url: '/sessions/nope' }),
        400,
        'VALIDATION_ERROR',
      );
      expectError(
        await t.app.server.inject({ method: 'DELETE', url: `/sessions/${UNKNOWN_SESSION}` }),
        404,
        'SESSION_NOT_FOUND',
      );
    });
  });
});
