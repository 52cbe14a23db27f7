/**
 * PATCH /sessions/:id and session export/import as NDJSON (DESIGN §14),
 * against the real app and a real SQLite file: a round trip keeps the
 * messages, summary, pointer and compaction history; a bad import leaves
 * nothing behind and says which line is wrong.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { seedSession, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';

const NDJSON = 'application/x-ndjson';

function conversation(count: number, tag = 'm'): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `${tag}${i} about the Lisbon offsite, budget ${i * 100} EUR`,
  }));
}

describe('PATCH /sessions/:id', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ fake: null });
  });
  afterAll(() => t.close());

  const patch = (id: string, payload: unknown) =>
    t.app.server.inject({ method: 'PATCH', url: `/sessions/${id}`, payload: payload as object });

  it('changes the title and compactCount and returns the session', async () => {
    const id = await seedSession(t.app, []);
    const res = await patch(id, { title: 'Offsite planning', compactCount: 33.3 });
    expect(res.statusCode).toBe(200);
    expect(res.json().session).toMatchObject({
      id,
      title: 'Offsite planning',
      compact_count: 33.3,
    });
    // Only what is sent changes; null clears the title.
    const again = await patch(id, { title: null });
    expect(again.json().session).toMatchObject({ title: null, compact_count: 33.3 });
  });

  it('refuses bad input with VALIDATION_ERROR and an unknown session with SESSION_NOT_FOUND', async () => {
    const id = await seedSession(t.app, []);
    for (const body of [{}, { compactCount: 0 }, { compactCount: 100 }, { colour: 'red' }]) {
      const res = await patch(id, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    const missing = await patch('sess_doesnotexist', { title: 'x' });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('SESSION_NOT_FOUND');
  });
});

describe('session export and import', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: TEST_AGENT, other: { ...TEST_AGENT, name: 'other' } },
    });
  });
  afterAll(() => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault((body) =>
      isSummaryRequest(body)
        ? {
            content: 'Summary: Lisbon offsite, budget decided.',
            usage: { prompt_tokens: 50, completion_tokens: 9 },
          }
        : { content: 'ok' },
    );
  });

  function inject(method: 'GET' | 'POST', url: string, payload?: string | object, type?: string) {
    return t.app.server.inject({
      method,
      url,
      ...(payload !== undefined ? { payload } : {}),
      ...(type ? { headers: { 'content-type': type } } : {}),
    });
  }
  const sessionCount = async () =>
    (await inject('GET', '/sessions?limit=500')).json().sessions.length as number;
  const allMessages = async (id: string) =>
    (await inject('GET', `/sessions/${id}/messages?limit=1000`)).json().messages as {
      session_id: string;
    }[];

  it('round trip: same messages, summary, pointer and compaction history under a new id', async () => {
    const id = await seedSession(t.app, [
      ...conversation(6),
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'current_time', arguments: '{}' } },
        ],
      },
      {
        role: 'tool',
        tool_call_id: 'call_1',
        name: 'current_time',
        content: '2026-12-01T00:00:00Z',
      },
      ...conversation(4, 'n'),
    ]);
    expect((await inject('POST', `/sessions/${id}/compact`)).statusCode).toBe(200);
    expect((await inject('POST', `/sessions/${id}/compact`)).statusCode).toBe(200);
    await t.app.store.appendMessages(id, conversation(2, 'tail'));

    const exported = await inject('GET', `/sessions/${id}/export`);
    expect(exported.statusCode).toBe(200);
    expect(exported.headers['content-type']).toContain(NDJSON);
    const lines = exported.body
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines[0]).toMatchObject({ type: 'session', format: 'cairn.session', version: 1 });
    expect(lines.filter((l) => l.type === 'message')).toHaveLength(15);
    expect(lines.filter((l) => l.type === 'compaction')).toHaveLength(2);

    const imported = await inject('POST', '/sessions/import', exported.body, NDJSON);
    expect(imported.statusCode, imported.body).toBe(201);
    const copy = imported.json().session;
    const original = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(copy.id).not.toBe(id);
    const same = (s: Record<string, unknown>) => {
      const { id: _id, epoch: _epoch, ...rest } = s;
      return rest;
    };
    expect(same(copy)).toEqual(same(original));

    const strip = (ms: { session_id: string }[]) => ms.map(({ session_id: _s, ...m }) => m);
    expect(strip(await allMessages(copy.id))).toEqual(strip(await allMessages(id)));
    const rows = async (sid: string) =>
      (
        (await inject('GET', `/sessions/${sid}/compactions`)).json().compactions as Record<
          string,
          unknown
        >[]
      ).map(({ id: _id, session_id: _s, ...r }) => r);
    expect(await rows(copy.id)).toEqual(await rows(id));
    // The next model call would see exactly the same context.
    const context = async (sid: string) =>
      (await inject('GET', `/sessions/${sid}/context`)).json().messages;
    expect(await context(copy.id)).toEqual(await context(id));
    // And the copy is a working session.
    const chat = await inject('POST', '/agents/assistant/chat', {
      message: 'still there?',
      sessionId: copy.id,
    });
    expect(chat.statusCode).toBe(200);
  });

  it('streams a large session line by line', async () => {
    const id = await seedSession(t.app, conversation(2_400));
    const exported = await inject('GET', `/sessions/${id}/export`);
    const lines = exported.body.trimEnd().split('\n');
    expect(lines).toHaveLength(1 + 2_401);
    const seqs = lines.slice(1).map((l) => JSON.parse(l).message.seq as number);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const imported = await inject('POST', '/sessions/import', exported.body, NDJSON);
    expect(imported.statusCode).toBe(201);
    expect(imported.json().session.message_count).toBe(2_401);
  });

  it('export of an unknown session is SESSION_NOT_FOUND', async () => {
    const res = await inject('GET', '/sessions/sess_doesnotexist/export');
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('SESSION_NOT_FOUND');
  });

  describe('a bad import is refused with the line at fault and leaves nothing behind', () => {
    let good: string[];
    beforeAll(async () => {
      const id = await seedSession(t.app, conversation(4));
      good = (await inject('GET', `/sessions/${id}/export`)).body.trimEnd().split('\n');
    });

    const cases: [string, () => string, number, RegExp][] = [
      ['not JSON', () => [good[0], '{oops', ...good.slice(2)].join('\n'), 400, /line 2: not JSON/],
      [
        'no session line first',
        () => good.slice(1).join('\n'),
        400,
        /line 1: the first line must be the session line/,
      ],
      [
        'seq going backwards',
        () => [good[0], good[2], good[1]].join('\n'),
        400,
        /line 3: seq \d+ must be greater than \d+/,
      ],
      [
        'a bad role',
        () => [good[0], good[1]!.replace('"role":"system"', '"role":"robot"')].join('\n'),
        400,
        /line 2: message\/role must be equal to one of the allowed values/,
      ],
      [
        'a pointer that does not match',
        () =>
          [good[0]!.replace('"compact_size":0', '"compact_size":3'), ...good.slice(1)].join('\n'),
        400,
        /summary pointer does not match/,
      ],
      [
        'an agent not loaded here',
        () =>
          [
            good[0]!.replace('"agent_name":"assistant"', '"agent_name":"ghost"'),
            ...good.slice(1),
          ].join('\n'),
        404,
        /Agent "ghost" not found/,
      ],
      ['an empty body', () => '\n', 400, /empty/],
    ];
    for (const [name, body, status, message] of cases) {
      it(name, async () => {
        const before = await sessionCount();
        const res = await inject('POST', '/sessions/import', body(), NDJSON);
        expect(res.statusCode, res.body).toBe(status);
        expect(res.json().error.message).toMatch(message);
        expect(await sessionCount()).toBe(before);
      });
    }

    it('a JSON body is refused with what to send', async () => {
      const res = await inject('POST', '/sessions/import', { session: {} });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.message).toContain(NDJSON);
    });
  });
});
