/**
 * The words inside a path, a URL, an e-mail address, a dotted version and
 * an underscored id are found one by one on both dialects, by recall and by
 * the history search (Postgres's parser keeps such tokens whole; migration
 * 027 splits them). On Postgres, a database from before 027 is searched by
 * its old column until the backfill has set every row's words, in batches
 * that resume from their mark, and every row inserted since has its words.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { PgStore, WORDS_BATCH } from '../../src/store/postgres/pg-store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

const term = (text: string) => ({ text, prefix: false });

const FACTS: ChatMessage[] = [
  { role: 'user', content: 'The nightly dump goes to /srv/backups/ledger-nightly now.' }, // 2
  { role: 'assistant', content: 'Noted.' }, // 3
  { role: 'user', content: 'Docs are at https://wiki.example.org/runbooks/failover?lang=en' }, // 4
  { role: 'assistant', content: 'Noted.' }, // 5
  { role: 'user', content: 'Write to oncall@harbourline.io when it pages.' }, // 6
  { role: 'assistant', content: 'Noted.' }, // 7
  { role: 'user', content: 'We pinned the driver at v4.2.19 last week.' }, // 8
  { role: 'assistant', content: 'Noted.' }, // 9
  { role: 'user', content: 'The flag is called enable_shadow_writes.' }, // 10
  { role: 'assistant', content: 'Noted.' }, // 11
];

const QUESTIONS: [string[], number][] = [
  [['ledger', 'backups'], 2],
  [['failover', 'runbooks'], 4],
  [['harbourline', 'oncall'], 6],
  [['driver', '19'], 8],
  [['enable_shadow_writes'], 10],
];

async function seeded(store: Store): Promise<string> {
  const session = await store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'You help.',
  });
  await store.appendMessages(session.id, FACTS);
  return session.id;
}

async function expectFound(store: Store, sessionId: string): Promise<void> {
  for (const [words, seq] of QUESTIONS) {
    const recalled = await store.recallMessages(sessionId, words.map(term), 11, 6);
    expect(
      recalled.map((h) => h.seq),
      words.join(' '),
    ).toEqual([seq]);
    const searched = await store.searchHistory(sessionId, words.join(' '), 5);
    expect(
      searched.map((h) => h.seq),
      words.join(' '),
    ).toContain(seq);
  }
}

describe('words inside paths, URLs, addresses, versions and ids', () => {
  let db: TestDatabase;
  let pgStore: PgStore;
  let dir: string;
  let sqlite: SqliteStore;

  beforeAll(async () => {
    db = await createTestDatabase();
    pgStore = await PgStore.open(db.url, { poolSize: 2 });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-split-words-'));
    sqlite = new SqliteStore(path.join(dir, 'cairn.db'));
  });
  afterAll(async () => {
    await pgStore?.close();
    await db?.drop();
    await sqlite?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('are found one by one on SQLite', async () => {
    await expectFound(sqlite, await seeded(sqlite));
  });

  it('are found one by one on Postgres, and every new row has its words', async () => {
    const id = await seeded(pgStore);
    await expectFound(pgStore, id);
    const unset = await pgStore.pool.query(
      'SELECT 1 FROM messages WHERE session_id = $1 AND words IS NULL',
      [id],
    );
    expect(unset.rowCount).toBe(0);
  });

  it('searches a database from before 027 by its old column until the backfill, which resumes from its mark', async () => {
    const id = await seeded(pgStore);
    await pgStore.appendMessages(
      id,
      Array.from({ length: WORDS_BATCH }, (_, i) => ({
        role: 'user' as const,
        content: `Filler ${i}.`,
      })),
    );
    // As migration 027 leaves a database that had messages: no words, the mark at 0.
    await pgStore.pool.query(`UPDATE messages SET words = NULL`);
    await pgStore.pool.query(
      'UPDATE history_words_backfill SET last_message_id = 0, until_id = (SELECT max(id) FROM messages)',
    );
    await pgStore.close();
    pgStore = await PgStore.open(db.url, { poolSize: 2 });
    // A word the old column holds is found meanwhile, whichever rows are filled yet.
    expect((await pgStore.recallMessages(id, [term('pinned')], 11, 6)).map((h) => h.seq)).toEqual([
      8,
    ]);
    while ((await pgStore.backfillWordsBatch()) > 0);
    const mark = await pgStore.pool.query<{ last_message_id: string; until_id: string }>(
      'SELECT last_message_id, until_id FROM history_words_backfill',
    );
    expect(mark.rows[0]!.last_message_id).toBe(mark.rows[0]!.until_id);
    const unset = await pgStore.pool.query('SELECT 1 FROM messages WHERE words IS NULL');
    expect(unset.rowCount).toBe(0);
    await expectFound(pgStore, id);
  });

  it('fills the backfill in batches of WORDS_BATCH that each move the mark', async () => {
    await pgStore.pool.query(`UPDATE messages SET words = NULL`);
    await pgStore.pool.query(
      'UPDATE history_words_backfill SET last_message_id = 0, until_id = (SELECT max(id) FROM messages)',
    );
    const total = Number(
      (await pgStore.pool.query<{ n: string }>('SELECT count(*) AS n FROM messages')).rows[0]!.n,
    );
    expect(total).toBeGreaterThan(WORDS_BATCH);
    expect(await pgStore.backfillWordsBatch()).toBe(WORDS_BATCH);
    const unset = await pgStore.pool.query('SELECT 1 FROM messages WHERE words IS NULL');
    expect(unset.rowCount).toBe(total - WORDS_BATCH);
  });
});
