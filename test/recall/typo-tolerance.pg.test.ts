/**
 * Typo tolerance on Postgres, both ways it finds a misspelling's neighbours:
 * `pg_trgm`'s trigram index where the extension can be created, and the
 * deletion keys SQLite uses where it cannot (here: the store told not to use
 * it, as on a server without the extension). A misspelled word recalls the
 * message holding the word the history has; a word the history holds is left
 * alone; an existing history is read into the vocabulary in batches that
 * resume from their mark.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { AutomaticRecall } from '../../src/recall/automatic-recall.js';
import { RecallLedger } from '../../src/recall/recall-ledger.js';
import type { GuardedTurn } from '../../src/runtime/context-guard.js';
import { PgStore } from '../../src/store/postgres/pg-store.js';
import { VOCABULARY_BATCH } from '../../src/store/vocabulary.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const SETTINGS = {
  enabled: true,
  maxMessages: 6,
  maxTokens: 1_200,
  minScore: 0.5,
  minRelativeScore: 0.4,
};

const WAYS = [
  { way: 'trigrams', trigrams: true },
  { way: 'deletion-keys', trigrams: false },
] as const;

describe.each(WAYS)('typo tolerance on Postgres ($way)', ({ way, trigrams }) => {
  let db: TestDatabase;
  let store: PgStore;

  beforeAll(async () => {
    db = await createTestDatabase();
    store = await PgStore.open(db.url, { poolSize: 2, trigrams });
  });

  afterAll(async () => {
    await store?.close();
    await db?.drop();
  });

  async function compacted(history: ChatMessage[]): Promise<GuardedTurn> {
    const created = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
    });
    const stored = await store.appendMessages(created.id, [
      ...history,
      { role: 'user', content: 'Tail.' },
    ]);
    await store.commitCompaction({
      sessionId: created.id,
      expectedSize: 0,
      toSize: history.length,
      toSeq: stored[history.length - 1]!.seq,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 10,
    });
    const session = (await store.findSession(created.id))!;
    const agent = { defaultCompaction: { recall: SETTINGS } } as AgentConfig;
    return { session, agent } as GuardedTurn;
  }

  async function recalled(turn: GuardedTurn, question: string): Promise<number[]> {
    const recall = new AutomaticRecall({
      store,
      contextWindow: 100_000,
      estimate: async () => 1_000,
      ledger: new RecallLedger(),
    });
    const { done } = await recall.recall(turn, [
      { role: 'system', content: 'System.' },
      { role: 'user', content: question },
    ]);
    return done?.seqs ?? [];
  }

  it('uses the way it was opened with', () => {
    expect(store.wordMatching).toBe(way);
  });

  it('finds a misspelled word as the word the history holds', async () => {
    const turn = await compacted([
      { role: 'user', content: 'I did not receive the invoice from the landlord.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
      { role: 'user', content: 'The reporting database runs postgres on the old host.' }, // 4
      { role: 'assistant', content: 'Noted too.' }, // 5
      { role: 'user', content: 'Our authentication gateway restarts at noon.' }, // 6
      { role: 'assistant', content: 'Ok.' }, // 7
    ]);
    expect(await recalled(turn, 'Did I recieve it?')).toEqual([2]);
    expect(await recalled(turn, 'Which postgress version?')).toEqual([4]);
    expect(await recalled(turn, 'Where is the authnetiication?')).toEqual([6]);
    expect(await recalled(turn, 'plnt?')).toEqual([]);
  });

  it('leaves a word the history holds as it is', async () => {
    const turn = await compacted([
      { role: 'user', content: 'The recieve queue is full.' },
      { role: 'assistant', content: 'The recieve queue drains at night.' },
      ...Array.from({ length: 6 }, (_, i) => ({
        role: 'user' as const,
        content: `We receive parcel ${i} at the gate.`,
      })),
    ]);
    const words = (...texts: string[]) => texts.map((text) => ({ text, prefix: false }));
    expect(
      await store.correctRecallTerms(
        turn.session.id,
        words('recieve', 'recelve', 'gatte', 'gatt'),
        turn.session.compact_seq,
      ),
    ).toEqual(words('recieve', 'receive', 'gate', 'gatt'));
  });

  it('reads an existing history into the vocabulary in batches that resume from their mark', async () => {
    const turn = await compacted(
      Array.from({ length: VOCABULARY_BATCH + 300 }, (_, i) => ({
        role: 'user' as const,
        content: i === 10 ? 'The warehouse is in Rotterdam.' : `Filler ${i}.`,
      })),
    );
    // As migrations 023 and 026 leave a database that already has messages: an empty vocabulary at mark 0.
    await store.pool.query(
      'DELETE FROM history_words; DELETE FROM history_word_keys; DELETE FROM history_session_stems; UPDATE history_vocabulary SET last_message_id = 0',
    );
    const total = Number(
      (await store.pool.query<{ n: string }>('SELECT count(*) AS n FROM messages')).rows[0]!.n,
    );
    expect(await store.indexVocabularyBatch()).toBe(VOCABULARY_BATCH);
    await store.close();
    store = await PgStore.open(db.url, { poolSize: 2, trigrams });
    // Opening starts the catch-up off start-up; a recall that needs the rest reads it first.
    const words = [{ text: 'warehose', prefix: false }];
    expect(
      await store.correctRecallTerms(turn.session.id, words, turn.session.compact_seq),
    ).toEqual([{ text: 'warehouse', prefix: false }]);
    expect(await store.indexVocabularyBatch()).toBe(0);
    const mark = await store.pool.query<{ m: string }>(
      'SELECT last_message_id AS m FROM history_vocabulary',
    );
    const last = await store.pool.query<{ m: string }>('SELECT max(id) AS m FROM messages');
    expect(mark.rows[0]!.m).toBe(last.rows[0]!.m);
    expect(total).toBeGreaterThan(VOCABULARY_BATCH);
  });
});
