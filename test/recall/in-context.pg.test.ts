/**
 * Recall ranks in context and in time, end to end on both store dialects: a
 * match whose neighbours hold the question's other words ranks above the
 * same match alone (the store reads the messages around its best matches),
 * and a question that names a day favours what was said that day, its date
 * not searched as words.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASES, chatOn, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';

const DAY_MS = 86_400_000;
const FIRST_DAY = Date.UTC(2023, 8, 1);
const SHAPES = ['heron', 'kestrel', 'plover', 'wren', 'osprey', 'curlew', 'dunlin'];
const PLACES = ['harbour', 'meadow', 'quarry', 'orchard', 'estuary'];

/** Message i (seq i + 1) is dated FIRST_DAY plus i days. */
const dated = (i: number) => new Date(FIRST_DAY + i * DAY_MS + 9 * 3_600_000).toISOString();

/** 80 dated messages of bird sightings, with the planted ones. */
function conversation(): string[] {
  const texts = Array.from(
    { length: 80 },
    (_, i) =>
      `Saw a ${SHAPES[i % SHAPES.length]} by the ${PLACES[i % PLACES.length]} on walk ${i}.`,
  );
  texts[10] = 'Our school play was fun.';
  texts[50] = 'Coach put me on the new team roster.';
  texts[51] = 'That team is lucky to have you.';
  texts[52] = 'I will play shooting guard for them, starting next week.';
  texts[20] = 'I picked up a brass lamp at the flea market.';
  texts[60] = 'I picked up a brass vase at the flea market.';
  return texts;
}

const MONTHS =
  'January February March April May June July August September October November December';
/** "31 October 2023": how a person names message i's day. */
function dayOf(i: number): string {
  const at = new Date(FIRST_DAY + i * DAY_MS);
  return `${at.getUTCDate()} ${MONTHS.split(' ')[at.getUTCMonth()]} ${at.getUTCFullYear()}`;
}

describe.each(DATABASES)('recall in context and in time (%s)', (database) => {
  let t: TestApp;
  let id: string;
  let pointer: number;

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: {
        assistant: {
          ...TEST_AGENT,
          defaultCompaction: { compactCount: 99, recall: { maxMessages: 1 } },
        },
      },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'They talked.' } : { content: 'ok' },
    );
    const lines = [
      {
        type: 'session',
        format: 'cairn.session',
        version: 1,
        session: {
          agent_name: 'assistant',
          mode: 'chat',
          status: 'active',
          created_at: dated(0),
          updated_at: dated(79),
          compact_count: 99,
        },
      },
      ...conversation().map((content, i) => ({
        type: 'message',
        message: {
          seq: i + 1,
          role: i % 2 === 0 ? 'user' : 'assistant',
          content,
          created_at: dated(i),
        },
      })),
    ];
    const imported = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': 'application/x-ndjson' },
      payload: lines.map((line) => JSON.stringify(line)).join('\n'),
    });
    expect(imported.statusCode, imported.body).toBe(201);
    id = imported.json<{ session: { id: string } }>().session.id;
    const compacted = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(compacted.statusCode, compacted.body).toBe(200);
    pointer = compacted.json<{ session: { compact_seq: number } }>().session.compact_seq;
    expect(pointer).toBeGreaterThan(61);
  });
  afterAll(async () => t?.close());

  it('ranks a match among matches above the same match alone, read from the messages around it', async () => {
    const words = ['play', 'team'].map((text) => ({ text, prefix: false }));
    const seqs = (await t.app.store.recallMessages(id, words, pointer, 18)).map((h) => h.seq);
    // Seq 53 and seq 11 hold "play" once; alone, the shorter seq 11 ranks
    // first. Seq 53 follows two messages that hold "team".
    expect(seqs).toContain(11);
    expect(seqs.indexOf(53)).toBeGreaterThanOrEqual(0);
    expect(seqs.indexOf(53)).toBeLessThan(seqs.indexOf(11));
    // Neighbours holding none of the words are read for context, not returned.
    expect([...seqs].sort((a, b) => a - b)).toEqual([11, 51, 52, 53]);
  });

  it('favours what was said on the day a question names', async () => {
    const recalled = async (message: string) => {
      const res = await chatOn(t.app, id, message);
      expect(res.statusCode, res.body).toBe(200);
      return res.json<{ recall: { seqs: number[] } | null }>().recall?.seqs;
    };
    // Equal matches: without a day, the earlier message.
    expect(await recalled('What did I pick up at the flea market?')).toEqual([21]);
    expect(await recalled(`What did I pick up at the flea market on ${dayOf(60)}?`)).toEqual([61]);
    expect(await recalled(`What did I pick up at the flea market on ${dayOf(20)}?`)).toEqual([21]);
    // A day nothing was said on changes nothing.
    expect(await recalled('What did I pick up at the flea market on 2 January 2022?')).toEqual([
      21,
    ]);
  });
});
