/**
 * What a compaction dropped, end to end on both dialects: every compaction
 * record in `GET /sessions/:id/compactions` carries `dropped` (the details of
 * the folded messages its summary lacks); export and import carry it, an
 * export from before it was recorded imports as `null`; and an automatic
 * compaction is announced by `context.compacting` before its summary call.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import {
  chatOn,
  DATABASES,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

const NDJSON = 'application/x-ndjson';

const FOLDED: ChatMessage[] = [
  { role: 'user', content: 'Book the Lisbon offsite under invoice INV-2024-001 for 4,500 euros.' },
  { role: 'assistant', content: 'Booked for 2026-03-15; the venue contact is Maria Lopez.' },
  { role: 'user', content: 'Thanks.' },
  { role: 'assistant', content: 'You are welcome.' },
];

interface Compaction {
  trigger: string;
  dropped: { text: string; kind: string; seq: number }[] | null;
}

describe.each(DATABASES)('what a compaction dropped (%s)', (database) => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: TEST_AGENT,
        // A small window and a low threshold: the second long turn compacts on its own.
        auto: { ...TEST_AGENT, name: 'auto', defaultCompaction: { autoThreshold: 50 } },
      },
      mainModel: { contextWindow: 2_000 },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    // The summary keeps the invoice and the amount (without its separator), not the date or the name.
    t.fake!.setDefault((body: { messages?: { role: string; content: unknown }[] }) =>
      isSummaryRequest(body)
        ? { content: '- Offsite booked: invoice INV-2024-001, 4500 euros.' }
        : { content: 'ok' },
    );
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });
  const compactionsOf = async (id: string) =>
    (await inject('GET', `/sessions/${id}/compactions`)).json<{ compactions: Compaction[] }>()
      .compactions;

  it('records on each compaction what its summary does not contain', async () => {
    const id = await seedSession(t.app, FOLDED, { agentName: 'assistant', compactCount: 99 });
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(200);
    const [record] = await compactionsOf(id);
    // Seqs: 1 is the system prompt, the folded messages are 2 to 5.
    expect(record!.dropped).toEqual([
      { text: 'Lisbon', kind: 'name', seq: 2 },
      { text: '2026-03-15', kind: 'date', seq: 3 },
      { text: 'Maria Lopez', kind: 'name', seq: 3 },
    ]);
  });

  it('carries dropped through export and import; an older export imports as null', async () => {
    const id = await seedSession(t.app, FOLDED, { agentName: 'assistant', compactCount: 99 });
    expect((await inject('POST', `/sessions/${id}/compact`)).statusCode).toBe(200);
    const exported = await inject('GET', `/sessions/${id}/export`);
    expect(exported.statusCode).toBe(200);
    const lines = exported.body.trim().split('\n');
    const compactionLine = JSON.parse(lines.at(-1)!) as { compaction: Compaction };
    expect(compactionLine.compaction.dropped).toHaveLength(3);

    const imported = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': NDJSON },
      payload: exported.body,
    });
    expect(imported.statusCode, imported.body).toBe(201);
    const copy = imported.json<{ session: { id: string } }>().session.id;
    expect((await compactionsOf(copy)).map((c) => c.dropped)).toEqual([
      compactionLine.compaction.dropped,
    ]);

    // An export written before `dropped` existed: the line has none.
    const { dropped: _dropped, ...older } = compactionLine.compaction;
    const olderBody = [
      ...lines.slice(0, -1),
      JSON.stringify({ type: 'compaction', compaction: older }),
    ].join('\n');
    const old = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': NDJSON },
      payload: `${olderBody}\n`,
    });
    expect(old.statusCode, old.body).toBe(201);
    const oldCopy = old.json<{ session: { id: string } }>().session.id;
    expect((await compactionsOf(oldCopy)).map((c) => c.dropped)).toEqual([null]);

    // A malformed list is refused, naming the line.
    const bad = [
      ...lines.slice(0, -1),
      JSON.stringify({ type: 'compaction', compaction: { ...older, dropped: [{ text: 'x' }] } }),
    ].join('\n');
    const refused = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': NDJSON },
      payload: `${bad}\n`,
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error.code).toBe('VALIDATION_ERROR');
  });

  it('announces an automatic compaction with context.compacting before its summary call', async () => {
    const long = (tag: string) => `${tag} ${'plain words about the offsite '.repeat(40)}`;
    let id: string | undefined;
    for (let turn = 0; turn < 6; turn++) {
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/agents/auto/chat',
        payload: { message: long(`turn${turn}`), ...(id ? { sessionId: id } : {}) },
      });
      expect(res.statusCode, res.body).toBe(200);
      id = res.json<{ sessionId: string }>().sessionId;
    }
    expect(summaryRequestsOf(t.fake!).length).toBeGreaterThan(0);
    const events = await t.app.store.listEvents({ afterId: 0, sessionId: id!, limit: 1_000 });
    const types = events.map((e) => e.type);
    const compacting = events.filter((e) => e.type === 'context.compacting');
    const landed = events.filter((e) => e.type === 'context.defaultCompacted');
    expect(compacting.length).toBe(landed.length);
    expect(types.indexOf('context.compacting')).toBeLessThan(
      types.indexOf('context.defaultCompacted'),
    );
    const first = compacting[0]!.data;
    expect(first).toEqual({
      sessionId: id,
      trigger: 'auto',
      messages: landed[0]!.data.compactedCount,
    });
    // Every automatic record has its list too.
    for (const record of await compactionsOf(id!)) expect(Array.isArray(record.dropped)).toBe(true);

    // A manual compaction is asked for by someone who is waiting for it: no event.
    await chatOn(t.app, id!, 'one more', 'auto');
    const before = (
      await t.app.store.listEvents({ afterId: 0, sessionId: id!, limit: 1_000 })
    ).filter((e) => e.type === 'context.compacting').length;
    await inject('POST', `/sessions/${id}/compact`);
    const after = (
      await t.app.store.listEvents({ afterId: 0, sessionId: id!, limit: 1_000 })
    ).filter((e) => e.type === 'context.compacting').length;
    expect(after).toBe(before);
  });
});
