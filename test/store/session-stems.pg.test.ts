/**
 * Recall on Postgres weighs each word by how many of the session's own
 * messages hold its stem (`history_session_stems`, migration 026): a word
 * another session repeats is still rare here and read whole; a reset starts
 * the session's counts again and a delete removes them; a database that had
 * a complete vocabulary before 026 is counted again from the start, once; and
 * a question whose evidence words are all rare costs two statements (the
 * counts, then their rows through the full-text index), a question of common
 * words one, at any length of the session.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { PgStore } from '../../src/store/postgres/pg-store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { StatementCounter } from '../helpers/statement-counter.js';

const term = (text: string) => ({ text, prefix: false });

let db: TestDatabase;
let store: PgStore;

beforeAll(async () => {
  db = await createTestDatabase();
  store = await PgStore.open(db.url, { poolSize: 2 });
});
afterAll(async () => {
  await store?.close();
  await db?.drop();
});

async function sessionWith(messages: ChatMessage[]): Promise<string> {
  const session = await store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You help.',
  });
  await store.appendMessages(session.id, messages);
  return session.id;
}

/** 450 messages that all hold "ferry" and "weather", seq 2 the first; `planted` replaces some. */
function ferryDays(planted: Record<number, string> = {}): ChatMessage[] {
  return Array.from({ length: 450 }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: planted[i] ?? `The ferry left on time and the weather was mild, day ${i}.`,
  }));
}

async function counted(sessionId: string, stem: string): Promise<number | undefined> {
  const rows = await store.pool.query<{ messages: number }>(
    'SELECT messages FROM history_session_stems WHERE session_id = $1 AND stem = $2',
    [sessionId, stem],
  );
  return rows.rows[0]?.messages;
}

describe('per-session stem counts on Postgres', () => {
  it('reads a word whole that this session holds rarely, however often another session says it', async () => {
    // "marina" is in every message of another session: by the database's
    // count it is common; by this session's, rare, so its row below the
    // newest 400 is found.
    await sessionWith(
      Array.from({ length: 600 }, (_, i) => ({
        role: 'user' as const,
        content: `The marina was full again, berth ${i}.`,
      })),
    );
    const id = await sessionWith(ferryDays({ 5: 'The ferry stopped at the marina on day five.' }));
    const found = await store.recallMessages(id, [term('ferry'), term('marina')], 451, 18);
    expect(found.map((h) => h.seq)).toEqual([7]);
    expect(await counted(id, 'marina')).toBe(1);
    expect(await counted(id, 'ferri')).toBe(450);
    expect(await counted(id, '')).toBe(450);
  });

  it('counts a reset session from its new messages only, and forgets a deleted one', async () => {
    const id = await sessionWith(ferryDays());
    expect(await store.recallMessages(id, [term('ferry')], 451, 18)).toEqual([]);
    expect(await counted(id, 'ferri')).toBe(450);

    await store.resetSession(id);
    expect(await counted(id, 'ferri')).toBeUndefined();
    // After the reset "ferry" is in one message of 450: evidence, and found
    // below the window. With the old counts (451 of 900) it would be common.
    const after = await store.appendMessages(
      id,
      Array.from({ length: 450 }, (_, i) => ({
        role: 'user' as const,
        content: i === 5 ? 'The ferry is cancelled.' : `The weather was mild, day ${i}.`,
      })),
    );
    const maxSeq = after.at(-1)!.seq;
    const found = await store.recallMessages(id, [term('ferry'), term('weather')], maxSeq, 18);
    expect(found.map((h) => h.seq)).toEqual([after[5]!.seq]);
    expect(await counted(id, 'ferri')).toBe(1);

    await store.deleteSession(id);
    const left = await store.pool.query(
      'SELECT 1 FROM history_session_stems WHERE session_id = $1',
      [id],
    );
    expect(left.rowCount).toBe(0);
  });

  it('costs three statements for rare evidence words and one for common words, at any length', async () => {
    const id = await sessionWith(
      ferryDays({ 5: 'The ferry stopped at the marina.', 440: 'Marina.' }),
    );
    // The first call reads the new messages into the counts.
    await store.recallMessages(id, [term('ferry')], 451, 18);
    const counter = StatementCounter.install();
    try {
      const rare = await counter.count(() =>
        store.recallMessages(id, [term('ferry'), term('marina')], 451, 18),
      );
      expect(rare.result.map((h) => h.seq).sort((a, b) => a - b)).toEqual([7, 442]);
      // The counts, the candidates, the messages around the best of them.
      expect(rare.statements.postgres).toBe(3);
      const common = await counter.count(() =>
        store.recallMessages(id, [term('ferry'), term('weather')], 451, 18),
      );
      expect(common.result).toEqual([]);
      expect(common.statements.postgres).toBe(1);
    } finally {
      counter.uninstall();
    }
  });

  it('counts a database whose vocabulary was complete before migration 026 again, once', async () => {
    const id = await sessionWith(ferryDays({ 7: 'The lighthouse keeper waved.' }));
    while ((await store.indexVocabularyBatch()) > 0);
    // As a database migrated to 025 with its vocabulary read to the end: no
    // stem counts, the mark at the last message, 026 not yet applied.
    await store.pool.query(
      'DROP TABLE history_session_stems; DELETE FROM schema_migrations WHERE version = 26',
    );
    const wordsBefore = await store.pool.query<{ messages: number }>(
      "SELECT messages FROM history_words WHERE word = 'lighthouse'",
    );
    await store.close();

    store = await PgStore.open(db.url, { poolSize: 2 });
    while ((await store.indexVocabularyBatch()) > 0);
    expect(await counted(id, 'lighthous')).toBe(1);
    expect(await counted(id, 'ferri')).toBe(449);
    expect(await counted(id, '')).toBe(450);
    // The vocabulary was emptied with the mark, so no word is counted twice.
    const wordsAfter = await store.pool.query<{ messages: number }>(
      "SELECT messages FROM history_words WHERE word = 'lighthouse'",
    );
    expect(wordsAfter.rows).toEqual(wordsBefore.rows);
    const found = await store.recallMessages(id, [term('lighthouse'), term('ferry')], 451, 18);
    expect(found.map((h) => h.seq)).toEqual([9]);
  });
});
