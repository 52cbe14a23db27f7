/**
 * SqliteStore: the shared Store contract on a real SQLite file, plus what only
 * SQLite has — pragmas, query plans of the hot queries, FTS index integrity,
 * several connections (and threads) on one file, lock timeouts and live backups.
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import ts from 'typescript';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CairnError } from '../../src/errors.js';
import {
  migrate,
  SQLITE_BUSY_TIMEOUT_MS,
  SQLITE_SYNC_BUSY_TIMEOUT_MS,
} from '../../src/store/sqlite/open-database.js';
import {
  HISTORY_INDEX_BATCH,
  SqliteStore,
  sessionMatch,
} from '../../src/store/sqlite/sqlite-store.js';
import { SQLITE_MIGRATIONS } from '../../src/store/migrations/index.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessageTokens } from '../../src/llm/tokens.js';
import { RecallPlanner, WORD_MATCHES_CAP } from '../../src/store/sqlite/recall-plan.js';
import { TERM_ROWS_CAP } from '../../src/store/recall-rank.js';
import { describeStoreContract } from './store-contract.js';

const SRC_DIR = fileURLToPath(new URL('../../src/', import.meta.url));

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-store-'));
}

describeStoreContract('SqliteStore', async () => {
  const dir = tempDir();
  const file = path.join(dir, 'cairn.db');
  const store = new SqliteStore(file);
  const instances: SqliteStore[] = [];
  return {
    store,
    async openInstance(instanceId) {
      const peer = new SqliteStore(file, { instanceId });
      instances.push(peer);
      return peer;
    },
    async cleanup() {
      for (const peer of instances) await peer.close();
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
});

describe('the Store contract suite', () => {
  it('exercises every method of the Store interface and of each part it extends', () => {
    const source = fs.readFileSync(path.join(SRC_DIR, 'store/store.ts'), 'utf8');
    const store = /export interface Store\s+extends([^{]*)\{([\s\S]*?)\n\}/.exec(source);
    expect(store).not.toBeNull();
    const parts = store![1]!.split(',').map((name) => name.trim());
    expect(parts).toEqual([
      'SessionStore',
      'MessageLog',
      'CompactionStore',
      'PreparedCompactionStore',
      'EventLog',
      'TaskStore',
      'DaemonLeaseStore',
      'MemoryStore',
      'InstanceStore',
      'ResponseStore',
      'FrontEndChatStore',
      'ChatStreamStore',
      'CallRecordStore',
      'VectorStore',
      'KeyStore',
    ]);
    const bodies = [
      store![2]!,
      ...parts.map((part) => {
        const body = new RegExp(`export interface ${part} \\{([\\s\\S]*?)\\n\\}`).exec(source)?.[1];
        expect(body, part).toBeDefined();
        return body!;
      }),
    ];
    const methods = bodies.flatMap((body) =>
      [...body.matchAll(/^\s{2}(\w+)\(/gm)].map((m) => m[1]!),
    );
    expect(methods.length).toBeGreaterThan(30);
    const contract = fs.readFileSync(
      fileURLToPath(new URL('./store-contract.ts', import.meta.url)),
      'utf8',
    );
    const missing = methods.filter((m) => !contract.includes(`store.${m}(`));
    expect(missing).toEqual([]);
  });
});

describe('SqliteStore on SQLite', () => {
  let dir: string;
  let dbPath: string;
  const opened: { close(): unknown }[] = [];

  function openStore(file = dbPath): SqliteStore {
    const store = new SqliteStore(file);
    opened.push(store);
    return store;
  }

  function openRaw(file = dbPath): Database.Database {
    const db = new Database(file);
    opened.push({ close: () => db.open && db.close() });
    return db;
  }

  beforeEach(() => {
    dir = tempDir();
    dbPath = path.join(dir, 'cairn.db');
  });
  afterEach(async () => {
    for (const handle of opened.splice(0)) await handle.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  function newSession(store: SqliteStore) {
    return store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System prompt.',
    });
  }

  it('recalls and searches the same messages whichever way the plan reads the index', async () => {
    const store = openStore();
    const session = await newSession(store);
    const other = await newSession(store);
    // A session long enough for the words-alone read (seq 2 … WORD_MATCHES_CAP + 1 are filler).
    const filler = Array.from({ length: WORD_MATCHES_CAP }, (_, i) => ({
      role: 'user' as const,
      content: `note ${i} about the garden and the weather`,
    }));
    await store.appendMessages(session.id, [
      ...filler,
      { role: 'user', content: 'the heron came back to the pond' },
      { role: 'assistant', content: 'a heron, a heron, at the pond again' },
      { role: 'user', content: 'pond water is low' },
    ]);
    const last = WORD_MATCHES_CAP + 4;
    const terms = [
      { text: 'heron', prefix: true },
      { text: 'pond', prefix: false },
    ];
    const countSql = store.db
      .prepare<[string, number], number>(
        'SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT ?)',
      )
      .pluck();
    const predicted = () =>
      new RecallPlanner((match, cap) => countSql.get(match, cap)!).plan(
        ['"heron"*', '"pond"'],
        last,
      );
    const recalled = async (s: SqliteStore) => [
      (await s.recallMessages(session.id, terms, last, 10)).map((h) => [h.seq, h.content]),
      (await s.searchHistory(session.id, 'heron pond', 10)).map((h) => [h.seq, h.snippet]),
    ];

    const before = await recalled(store);
    expect(predicted()).toBe('words');
    expect(before[0]!.map(([seq]) => seq)).toEqual([last - 1, last - 2, last]);
    expect(before[1]!.map(([seq]) => seq)).toEqual(
      expect.arrayContaining([last - 2, last - 1, last]),
    );
    expect(before[1]!.find(([seq]) => seq === last)?.[1]).toContain('[pond]');

    // Another session makes the words common: a new store reads the session's entries instead.
    await store.appendMessages(
      other.id,
      Array.from({ length: WORD_MATCHES_CAP }, (_, i) => ({
        role: 'user' as const,
        content: `heron pond ${i}`,
      })),
    );
    await store.indexHistory();
    expect(predicted()).toBe('session');
    expect(await recalled(openStore())).toEqual(before);
  });

  it("keeps a session's message ids growing with its seq, which recall's bound relies on", async () => {
    const store = openStore();
    const a = await newSession(store);
    const b = await newSession(store);
    // Interleaved sessions, a reset, an import and a fork: every way messages are written.
    for (let i = 0; i < 3; i++) {
      await store.appendMessages(a.id, [{ role: 'user', content: `a ${i}` }]);
      await store.appendMessages(b.id, [{ role: 'user', content: `b ${i}` }]);
    }
    await store.resetSession(b.id);
    await store.appendMessages(b.id, [{ role: 'user', content: 'b after the reset' }]);
    const imported = await newSession(store);
    await store.appendImportedMessages(imported.id, [
      { role: 'user', content: 'first', seq: 2, created_at: '2026-01-01T00:00:00.000Z' },
      { role: 'assistant', content: 'second', seq: 5, created_at: '2026-01-01T00:00:01.000Z' },
    ]);
    const fork = await store.forkSession(a.id, 3);
    expect(fork.kind).toBe('forked');
    await store.appendMessages(a.id, [{ role: 'user', content: 'a later' }]);
    const sessions = [a.id, b.id, imported.id, fork.kind === 'forked' ? fork.session.id : ''];
    for (const id of sessions) {
      const rows = store.db
        .prepare<[string], { id: number; seq: number }>(
          'SELECT id, seq FROM messages WHERE session_id = ? ORDER BY seq',
        )
        .all(id);
      expect(rows.length, id).toBeGreaterThan(1);
      const ids = rows.map((r) => r.id);
      expect(ids, id).toEqual([...ids].sort((x, y) => x - y));
    }
  });

  it("weighs recall's words by this session's messages, whatever other sessions hold", async () => {
    const store = openStore();
    const session = await newSession(store);
    const other = await newSession(store);
    // In this session "alpha" is common and "beta" rare; across the index, the other way round.
    await store.appendMessages(session.id, [
      { role: 'user', content: 'alpha filler words' }, // 2
      { role: 'user', content: 'beta filler words.' }, // 3
      ...Array.from({ length: 8 }, (_, i) => ({
        role: 'assistant' as const,
        content: `alpha reply number ${i}`,
      })),
    ]);
    await store.appendMessages(
      other.id,
      Array.from({ length: 200 }, () => ({ role: 'user' as const, content: 'beta beta' })),
    );
    const terms = [
      { text: 'alpha', prefix: false },
      { text: 'beta', prefix: false },
    ];
    const hits = await store.recallMessages(session.id, terms, 11, 3);
    // The rare word's message first; then the "alpha" messages with the most
    // matches around them (each scores in context: recall-rank.ts).
    expect(hits.map((h) => h.seq)).toEqual([3, 4, 5]);
    expect(hits[0]!.content).toBe('beta filler words.');
  });

  it("reads a common word's newest rows only, and a rare word's every row", async () => {
    const store = openStore();
    const session = await newSession(store);
    // The oldest messages say "alpha" the most times; 200 newer ones once each.
    await store.appendMessages(session.id, [
      { role: 'user', content: 'alpha alpha alpha alpha zeta' }, // 2
      { role: 'user', content: 'alpha alpha alpha alpha' }, // 3
      ...Array.from({ length: 200 }, (_, i) => ({
        role: 'assistant' as const,
        content: `alpha reply number ${i}`,
      })),
    ]);
    const last = 203;
    const alpha = { text: 'alpha', prefix: false };
    // Only the newest TERM_ROWS_CAP rows holding a common word are candidates.
    const common = await store.recallMessages(session.id, [alpha], last, 3);
    expect(common.map((h) => h.seq).every((seq) => seq > last - TERM_ROWS_CAP)).toBe(true);
    // A rarer word is read whole: its one old row is found and ranks first.
    const rare = await store.recallMessages(
      session.id,
      [alpha, { text: 'zeta', prefix: false }],
      last,
      3,
    );
    expect(rare[0]!.seq).toBe(2);
  });

  it('opens with WAL, foreign keys, busy_timeout and synchronous=NORMAL', () => {
    const { db } = openStore();
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(db.pragma('foreign_keys', { simple: true })).toBe(1);
    // A tiny synchronous wait; the store waits out the rest asynchronously (56).
    expect(db.pragma('busy_timeout', { simple: true })).toBe(SQLITE_SYNC_BUSY_TIMEOUT_MS);
    expect(SQLITE_SYNC_BUSY_TIMEOUT_MS).toBeLessThanOrEqual(50);
    expect(SQLITE_BUSY_TIMEOUT_MS).toBeGreaterThanOrEqual(1_000);
    expect(db.pragma('synchronous', { simple: true })).toBe(1);
    // SQLite's own page cache as built, unless database.cacheMb says otherwise.
    expect(db.pragma('cache_size', { simple: true })).toBe(-16_000);
    const small = new SqliteStore(path.join(dir, 'small.db'), { cacheMb: 2 });
    expect(small.db.pragma('cache_size', { simple: true })).toBe(-2_048);
    small.db.close();
  });

  it('uses an index, never a scan, for the tail, system, paging and search queries', async () => {
    const store = openStore();
    const session = await newSession(store);
    for (let i = 0; i < 50; i++) {
      await store.appendMessages(session.id, [
        { role: 'user', content: `question ${i}` },
        { role: 'assistant', content: `answer ${i}` },
      ]);
    }
    // The prepared statements are private; their SQL is what the store really runs.
    const statements = store['stmt'] as unknown as Record<string, Database.Statement>;
    const planOf = (name: string, ...params: unknown[]): string[] => {
      const statement = statements[name];
      expect(statement, name).toBeDefined();
      return (
        store.db.prepare(`EXPLAIN QUERY PLAN ${statement!.source}`).all(...params) as {
          detail: string;
        }[]
      ).map((row) => row.detail);
    };

    const check = () => {
      const plans = {
        tailMessages: planOf('tailMessages', session.id, 10),
        systemMessages: planOf('systemMessages', session.id),
        pageMessages: planOf('pageMessages', session.id, 10, 20),
        tailPage: planOf('tailPage', session.id, 10, 20),
        messageMeta: planOf('messageMeta', session.id, 10),
      };
      for (const [name, plan] of Object.entries(plans)) {
        const text = plan.join('\n');
        expect(text, name).toMatch(/SEARCH messages USING (COVERING )?INDEX/);
        expect(text, name).not.toMatch(/SCAN messages\b/);
        // The index order serves ORDER BY seq: no sort of a long session in memory.
        expect(text, name).not.toMatch(/TEMP B-TREE/);
      }
      // The full-text searches run one session-scoped MATCH first, then fetch
      // each hit by id; never the session's rows first with a MATCH per row.
      const match = sessionMatch(session.id, '"question" OR "answer"');
      const searches = {
        searchHistory: planOf('searchHistory', match, session.id, 10),
      };
      for (const [name, plan] of Object.entries(searches)) {
        expect(plan[0], name).toMatch(/^SCAN messages_fts VIRTUAL TABLE INDEX \d+:M/);
        const text = plan.join('\n');
        expect(text, name).not.toMatch(/SCAN m\b/);
        expect(text, name).toMatch(/SEARCH m USING INTEGER PRIMARY KEY/);
      }
      // Recall's reads: a word's rows from the index alone (or checked row by row), the rows read by id,
      // the session's bound and system messages from its indexes.
      // Newest first from the index itself (FTS5 walks the list backwards): no sort.
      expect(planOf('wordRows', match, 100, 10)).toEqual([
        expect.stringMatching(/^SCAN messages_fts VIRTUAL TABLE INDEX \d+:M/),
      ]);
      expect(planOf('seqOfId', 1).join('\n')).toMatch(/SEARCH messages USING INTEGER PRIMARY KEY/);
      const searchable = planOf('searchableWordRows', match, 100, session.id, 100);
      expect(searchable[0]).toMatch(/^SCAN messages_fts VIRTUAL TABLE INDEX \d+:M/);
      for (const text of [
        searchable.join('\n'),
        planOf('recallRows', '[1,2]', session.id, 100).join('\n'),
      ]) {
        expect(text).not.toMatch(/SCAN m\b/);
        expect(text).toMatch(/SEARCH m USING INTEGER PRIMARY KEY/);
      }
      for (const [name, params] of [
        ['recallBound', [session.id, 100]],
        ['systemIds', [session.id]],
      ] as const) {
        const text = planOf(name, ...params).join('\n');
        expect(text, name).toMatch(/SEARCH messages USING COVERING INDEX/);
        expect(text, name).not.toMatch(/TEMP B-TREE/);
      }
      // Before a recall: the short history-index queue first, each queued row by id.
      const queuedUpTo = planOf('queuedUpTo', session.id, 100).join('\n');
      expect(queuedUpTo).toMatch(/SCAN p\b/);
      expect(queuedUpTo).not.toMatch(/SCAN m\b/);
      expect(queuedUpTo).toMatch(/SEARCH m USING INTEGER PRIMARY KEY/);
      // Other per-request lookups: polled event streams, tasks, memory, session and task rows.
      const others: [string, string, unknown[]][] = [
        ['eventsAfter', 'events', [0, 100]],
        ['sessionEventsAfter', 'events', [session.id, 0, 100]],
        ['waitingTask', 'tasks', [session.id]],
        ['getTask', 'tasks', ['task_x']],
        ['getSession', 'sessions', [session.id]],
        ['listMemory', 'memory', ['assistant', 100]],
        ['latestCompaction', 'compactions', [session.id]],
        [
          'sessionByTranscript',
          'sessions',
          [{ agent: 'assistant', hash: 'hash', owner_key: 'key_a', end_user: 'alice' }],
        ],
        ['ownerEventsAfter', 'events', [{ after: 0, owner_key: 'key_a', limit: 100 }]],
      ];
      for (const [name, table, params] of others) {
        const text = planOf(name, ...params).join('\n');
        expect(text, name).toMatch(new RegExp(`SEARCH ${table} USING`));
        expect(text, name).not.toMatch(new RegExp(`SCAN ${table}\\b`));
      }
    };
    check();
    // Statistics must not talk the planner into a scan either.
    store.db.exec('ANALYZE');
    check();
  });

  it('keeps the full-text indexes in step with deletes, resets, cascades and updates', async () => {
    const store = openStore();
    const a = await newSession(store);
    const b = await newSession(store);
    await store.appendMessages(a.id, [
      { role: 'user', content: 'alpha words here' },
      { role: 'assistant', content: null, tool_calls: [] },
      { role: 'assistant', content: 'more alpha' },
    ]);
    await store.appendMessages(b.id, [{ role: 'user', content: 'beta words' }]);
    await store.resetSession(a.id);
    await store.appendMessages(a.id, [{ role: 'user', content: 'after reset' }]);
    await store.deleteSession(b.id);
    await store.putMemory('assistant', 'k1', 'one');
    await store.putMemory('assistant', 'k1', 'one updated');
    await store.putMemory('assistant', 'k2', 'two');
    await store.deleteMemory('assistant', 'k2');

    await store.indexHistory(); // what a search or the batch after an append does
    // Throws SQLITE_CORRUPT_VTAB when the index and its content table disagree.
    store.db.exec("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')");
    store.db.exec("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')");
    const indexed = store.db.prepare('SELECT COUNT(*) FROM messages_fts').pluck().get();
    const withContent = store.db
      .prepare('SELECT COUNT(*) FROM messages WHERE content IS NOT NULL')
      .pluck()
      .get();
    expect(indexed).toBe(withContent);
    expect((await store.searchHistory(a.id, 'alpha', 10)).length).toBe(0);
    expect((await store.searchHistory(a.id, 'reset', 10)).length).toBe(1);
    expect(store.db.pragma('foreign_key_check')).toEqual([]);
  });

  it("names a session in the MATCH by its id's own token, never the 'sess' every row holds", async () => {
    expect(sessionMatch('sess_0a1b2c', '"x"')).toBe('session_id : "0a1b2c" AND content : ("x")');
    // An id of another shape (an import's) is matched whole, quotes doubled.
    expect(sessionMatch('legacy"id', '"x"')).toBe('session_id : "legacy""id" AND content : ("x")');
    // Scoped all the same: two sessions with the same words, each search finds its own.
    const store = openStore();
    const [a, b] = [await newSession(store), await newSession(store)];
    await store.appendMessages(a.id, [{ role: 'user', content: 'the lighthouse keeper' }]);
    await store.appendMessages(b.id, [{ role: 'user', content: 'the lighthouse stairs' }]);
    for (const [session, own] of [
      [a, 'keeper'],
      [b, 'stairs'],
    ] as const) {
      const hits = await store.searchHistory(session.id, 'lighthouse', 10);
      expect(hits.map((h) => h.snippet)).toEqual([expect.stringContaining(own)]);
    }
  });

  describe('the history index, filled in batches off the turn (migration 008)', () => {
    const queued = (store: SqliteStore) =>
      store.db.prepare('SELECT COUNT(*) FROM messages_fts_pending').pluck().get() as number;
    // A scan of an external-content table reads the content table; docsize has one row per indexed row.
    const indexed = (store: SqliteStore) =>
      store.db.prepare('SELECT COUNT(*) FROM messages_fts_docsize').pluck().get() as number;
    // rank 1: also compare the index with the messages, which catches a 'delete' of a row
    // the index never held. It needs every message to have content and the queue empty.
    const checkIndex = (store: SqliteStore) =>
      store.db.exec("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)");

    it('an append queues its messages instead of indexing them; a search sees them at once', async () => {
      const store = openStore();
      const session = await newSession(store);
      await store.appendMessages(session.id, [
        { role: 'user', content: 'where is the lighthouse' },
      ]);
      expect(queued(store)).toBe(2); // the system prompt and the question
      expect(indexed(store)).toBe(0);
      const hits = await store.searchHistory(session.id, 'lighthouse', 10);
      expect(hits).toEqual([{ seq: 2, role: 'user', snippet: 'where is the [lighthouse]' }]);
      expect(queued(store)).toBe(0);
      expect(indexed(store)).toBe(2);
      checkIndex(store);
    });

    it('a recall indexes the queue only when a queued message is in the range it searches', async () => {
      const store = openStore();
      const session = await newSession(store);
      const term = (text: string) => ({ text, prefix: false });
      await store.appendMessages(session.id, [
        { role: 'user', content: 'the heron nests by the lake' },
        { role: 'assistant', content: 'noted' },
      ]);
      await store.indexHistory();
      // The turn's own appends lie above the pointer (seq 3): a recall cannot return them.
      await store.appendMessages(session.id, [
        { role: 'user', content: 'where does the heron nest' },
      ]);
      const hits = await store.recallMessages(session.id, [term('heron')], 3, 10);
      expect(hits.map((hit) => hit.seq)).toEqual([2]);
      expect(queued(store)).toBe(1);
      // Once the pointer covers a queued message, the recall indexes the queue first.
      const again = await store.recallMessages(session.id, [term('heron')], 4, 10);
      expect(again.map((hit) => hit.seq).sort()).toEqual([2, 4]);
      expect(queued(store)).toBe(0);
      checkIndex(store);
    });

    it('the batch after an append indexes the queue without a search', async () => {
      const store = openStore();
      const session = await newSession(store);
      await store.appendMessages(session.id, [{ role: 'user', content: 'queued words' }]);
      await vi.waitFor(() => expect(queued(store)).toBe(0), { timeout: 10_000, interval: 50 });
      expect(indexed(store)).toBe(2);
      checkIndex(store);
    });

    it('deleting queued and indexed rows keeps the index whole, and a reused id is indexed', async () => {
      const store = openStore();
      const session = await newSession(store);
      await store.appendMessages(session.id, [{ role: 'user', content: 'indexed first' }]);
      await store.indexHistory();
      await store.appendMessages(session.id, [{ role: 'user', content: 'still queued' }]);
      // Reset deletes one indexed and one queued row (the system prompt stays).
      await store.resetSession(session.id);
      expect(queued(store)).toBe(0);
      checkIndex(store);
      // The highest id was deleted, so SQLite hands it out again.
      await store.appendMessages(session.id, [{ role: 'user', content: 'reused identifier' }]);
      expect((await store.searchHistory(session.id, 'reused', 10)).map((h) => h.seq)).toEqual([4]);
      expect(await store.searchHistory(session.id, 'queued', 10)).toEqual([]);
      expect(await store.searchHistory(session.id, 'indexed', 10)).toEqual([]);
      await store.deleteSession(session.id);
      checkIndex(store);
      expect(indexed(store)).toBe(0);
    });

    it('indexes a long queue in several batches', async () => {
      const store = openStore();
      const session = await newSession(store);
      const many = Array.from({ length: HISTORY_INDEX_BATCH + 10 }, (_, i) => ({
        role: 'user' as const,
        content: `note ${i}`,
      }));
      await store.appendMessages(session.id, many);
      expect(await store.indexHistoryBatch()).toBe(HISTORY_INDEX_BATCH);
      expect(queued(store)).toBe(11);
      expect(
        (await store.searchHistory(session.id, String(HISTORY_INDEX_BATCH + 9), 10)).length,
      ).toBe(1);
      expect(queued(store)).toBe(0);
      checkIndex(store);
    });

    it('a database indexed by the old trigger is searchable after the upgrade (018 queues it again)', async () => {
      const db = new Database(dbPath);
      migrate(
        db,
        SQLITE_MIGRATIONS.filter((m) => m.version < 8),
      );
      const now = new Date().toISOString();
      db.prepare(
        "INSERT INTO sessions (id, agent_name, mode, created_at, updated_at) VALUES ('sess_old', 'assistant', 'chat', ?, ?)",
      ).run(now, now);
      db.prepare(
        "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('sess_old', 1, 'user', 'an archived harbour', ?)",
      ).run(now);
      db.close();

      const store = openStore();
      // 008 kept the old index; 018 rebuilds it stemmed, from the queue.
      expect(queued(store)).toBe(1);
      expect((await store.searchHistory('sess_old', 'harbour', 10)).map((h) => h.seq)).toEqual([1]);
      expect(queued(store)).toBe(0);
      expect(indexed(store)).toBe(1);
      await store.resetSession('sess_old');
      checkIndex(store);
      expect(indexed(store)).toBe(0);
    });
  });

  it('rows written before migration 007 have no stored token estimate; new rows get one', async () => {
    const store = openStore();
    const session = await newSession(store);
    await store.appendMessages(session.id, [{ role: 'user', content: 'an old message' }]);
    store.db.exec('UPDATE messages SET tokens = NULL'); // as migration 007 leaves old rows
    await store.appendMessages(session.id, [{ role: 'assistant', content: 'a new one' }]);
    const { system, tail } = await store.loadContext(session.id, 0);
    expect(system[0]).not.toHaveProperty('tokens');
    expect(tail[0]).not.toHaveProperty('tokens');
    expect(tail[1]?.tokens).toBe(
      estimateMessageTokens({ role: 'assistant', content: 'a new one' }),
    );
  });

  it('keeps everything across close and reopen', async () => {
    const store = openStore();
    const session = await newSession(store);
    await store.appendMessages(session.id, [{ role: 'user', content: 'persist me' }]);
    await store.commitCompaction({
      sessionId: session.id,
      expectedSize: 0,
      toSize: 1,
      toSeq: 2,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 10,
    });
    await store.putMemory('assistant', 'k', 'v');
    const before = await store.findSession(session.id);
    await store.close();

    const reopened = openStore();
    expect(await reopened.findSession(session.id)).toEqual(before);
    expect(
      (await reopened.listMessages(session.id, { afterSeq: 0, limit: 10 })).map((m) => m.content),
    ).toEqual(['System prompt.', 'persist me']);
    expect(await reopened.listCompactions(session.id)).toHaveLength(1);
    expect(await reopened.listMemory('assistant', 'v')).toHaveLength(1);
  });

  it('two connections on one file, interleaving appends, lose nothing', async () => {
    const a = openStore();
    const b = openStore();
    const session = await newSession(a);
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const store = i % 2 === 0 ? a : b;
      const batch: ChatMessage[] = Array.from({ length: (i % 3) + 1 }, (_, k) => ({
        role: 'user',
        content: `w${i}.${k}`,
      }));
      writes.push(
        store.appendMessages(session.id, batch, { usage: { input_tokens: 1, output_tokens: 1 } }),
      );
    }
    await Promise.all(writes);
    const expectedContents = Array.from({ length: 60 }, (_, i) =>
      Array.from({ length: (i % 3) + 1 }, (_, k) => `w${i}.${k}`),
    ).flat();

    for (const store of [a, b]) {
      const messages = await store.listMessages(session.id, { afterSeq: 0, limit: 1_000 });
      expect(messages.map((m) => m.seq)).toEqual(
        Array.from({ length: expectedContents.length + 1 }, (_, i) => i + 1),
      );
      // Nothing lost; each connection's writes in the order it was asked for
      // them (two connections' unawaited writes interleave as their commits do).
      const contents = messages.slice(1).map((m) => m.content);
      expect([...contents].sort()).toEqual([...expectedContents].sort());
      for (const parity of [0, 1]) {
        const fromOne = (list: readonly (string | null)[]) =>
          list.filter((c) => Number(/^w(\d+)/.exec(c ?? '')![1]) % 2 === parity);
        expect(fromOne(contents)).toEqual(fromOne(expectedContents));
      }
      expect(await store.findSession(session.id)).toMatchObject({
        message_count: expectedContents.length + 1,
        input_tokens: 60,
        output_tokens: 60,
      });
    }
  });

  it('two threads writing to one file at the same time lose nothing and never see SQLITE_BUSY', async () => {
    const store = openStore();
    const session = await newSession(store);
    const taskSession = await store.createSession({
      agentName: 'assistant',
      mode: 'task',
      compactCount: 50,
      systemPrompt: 'Tasks.',
    });
    const taskIds: string[] = [];
    for (let i = 0; i < 40; i++) {
      const task = await store.createTask({
        sessionId: taskSession.id,
        agentName: 'assistant',
        input: `task ${i}`,
      });
      await store.transitionTask(task.id, ['running'], { status: 'waiting', question: 'q' });
      taskIds.push(task.id);
    }

    const workerDir = path.join(dir, 'worker');
    const workerFile = buildStoreForWorkers(workerDir);
    const rounds = 150;
    const results = await runWorkers(workerFile, [
      { dbPath, sessionId: session.id, tag: 'left', rounds, taskIds },
      { dbPath, sessionId: session.id, tag: 'right', rounds, taskIds },
    ]);

    for (const result of results) {
      expect(result.errors).toEqual([]);
      expect(result.appended).toBe(rounds);
    }
    const messages = await store.listMessages(session.id, { afterSeq: 0, limit: 10_000 });
    const total = 1 + 2 * 2 * rounds;
    expect(messages.map((m) => m.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    for (const tag of ['left', 'right']) {
      for (let i = 0; i < rounds; i++) {
        const question = messages.findIndex((m) => m.content === `${tag} question ${i}`);
        expect(question, `${tag} ${i}`).toBeGreaterThan(0);
        // Each batch is one transaction: its two messages are adjacent.
        expect(messages[question + 1]?.content).toBe(`${tag} answer ${i}`);
      }
    }
    expect(new Set(messages.map((m) => m.content)).size).toBe(total);
    expect(await store.findSession(session.id)).toMatchObject({
      message_count: total,
      input_tokens: 2 * rounds,
      output_tokens: 4 * rounds,
    });

    // Every waiting task was resumed exactly once, by one thread or the other.
    const won = results.flatMap((r) => r.won);
    expect(won.sort()).toEqual([...taskIds].sort());
    for (const id of taskIds) expect((await store.findTask(id))?.status).toBe('running');
    expect(store.db.pragma('integrity_check', { simple: true })).toBe('ok');
  });

  it('maps a lock held past the busy budget to a retryable 503, and recovers', async () => {
    const store = new SqliteStore(dbPath, { busyBudgetMs: 100 });
    opened.push(store);
    const session = await newSession(store);
    const other = openRaw();
    other.exec('BEGIN IMMEDIATE');
    other.prepare("UPDATE sessions SET title = 'held' WHERE id = ?").run(session.id);

    const err = await store.appendMessages(session.id, [{ role: 'user', content: 'blocked' }]).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(CairnError);
    expect(err).toMatchObject({ code: 'SERVICE_UNAVAILABLE', status: 503 });
    await expect(
      store.transitionTask('task_x', ['running'], { status: 'failed' }),
    ).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
    // WAL: readers are not blocked by the writer.
    expect(await store.listMessages(session.id, { afterSeq: 0, limit: 10 })).toHaveLength(1);

    other.exec('ROLLBACK');
    await store.appendMessages(session.id, [{ role: 'user', content: 'now it works' }]);
    expect(
      (await store.listMessages(session.id, { afterSeq: 0, limit: 10 })).map((m) => m.content),
    ).toEqual(['System prompt.', 'now it works']);
    expect((await store.findSession(session.id))?.title).toBeNull();
  });

  it('a backup taken with db.backup() during writes opens and passes integrity_check', async () => {
    const store = openStore();
    const session = await newSession(store);
    const filler = 'lorem ipsum dolor sit amet '.repeat(40);
    for (let i = 0; i < 40; i++) {
      await store.appendMessages(
        session.id,
        Array.from({ length: 50 }, (_, k) => ({
          role: 'user' as const,
          content: `${i}.${k} ${filler}`,
        })),
      );
    }
    await store.putMemory('assistant', 'note', 'kept in the backup');
    const prefilled = 1 + 40 * 50;

    const backupPath = path.join(dir, 'backup', 'cairn-backup.db');
    fs.mkdirSync(path.dirname(backupPath));
    let finished = false;
    let steps = 0;
    const backup = store.db
      .backup(backupPath, {
        progress: () => {
          steps += 1;
          return 16; // pages per step: small, so the copy spans many event-loop turns
        },
      })
      .finally(() => {
        finished = true;
      });
    let writesDuring = 0;
    while (!finished) {
      await store.appendMessages(session.id, [
        { role: 'user', content: `during ${writesDuring}` },
        { role: 'assistant', content: `reply ${writesDuring}` },
      ]);
      await store.appendEvent({ type: 'message.created', sessionId: session.id, data: {} });
      writesDuring += 1;
      await new Promise((resolve) => setImmediate(resolve));
    }
    const info = await backup;
    expect(info.remainingPages).toBe(0);
    expect(steps).toBeGreaterThan(1);
    expect(writesDuring).toBeGreaterThan(1);

    const copy = openRaw(backupPath);
    expect(copy.pragma('integrity_check', { simple: true })).toBe('ok');
    expect(copy.pragma('foreign_key_check')).toEqual([]);
    copy.exec("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')");
    const seqs = copy
      .prepare('SELECT seq FROM messages WHERE session_id = ? ORDER BY seq')
      .pluck()
      .all(session.id) as number[];
    // A consistent snapshot: a gap-free prefix of the history, at least what existed before.
    expect(seqs.length).toBeGreaterThanOrEqual(prefilled);
    expect(seqs.length).toBeLessThanOrEqual(prefilled + 2 * writesDuring);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1));
    expect(
      copy.prepare('SELECT message_count FROM sessions WHERE id = ?').pluck().get(session.id),
    ).toBe(seqs.length);
    copy.close();

    // The copy is a working Cairn database.
    const restored = openStore(backupPath);
    expect(await restored.listMemory('assistant', 'backup')).toHaveLength(1);
    const [next] = await restored.appendMessages(session.id, [
      { role: 'user', content: 'restored' },
    ]);
    expect(next?.seq).toBe(seqs.length + 1);
    // The live database kept every write.
    expect((await store.findSession(session.id))?.message_count).toBe(prefilled + 2 * writesDuring);
  });
});

// ---- worker threads ----------------------------------------------------------

interface WorkerJob {
  dbPath: string;
  sessionId: string;
  tag: string;
  rounds: number;
  taskIds: string[];
}

interface WorkerResult {
  appended: number;
  errors: string[];
  won: string[];
}

/**
 * Worker threads cannot load TypeScript, so the store's module graph is
 * transpiled (types stripped, nothing else changed) into `outDir`, with the
 * `better-sqlite3` import pointed at this repo's copy. Returns the worker script.
 */
function buildStoreForWorkers(outDir: string): string {
  const betterSqlite = pathToFileURL(createRequire(import.meta.url).resolve('better-sqlite3')).href;
  const pending = ['store/sqlite/sqlite-store.ts'];
  const done = new Set<string>();
  while (pending.length > 0) {
    const rel = pending.pop()!;
    if (done.has(rel)) continue;
    done.add(rel);
    const source = fs.readFileSync(path.join(SRC_DIR, rel), 'utf8');
    const { outputText } = ts.transpileModule(source, {
      fileName: rel,
      compilerOptions: {
        module: ts.ModuleKind.ES2022,
        target: ts.ScriptTarget.ES2022,
        verbatimModuleSyntax: true,
      },
    });
    const js = outputText
      .replace(/from '(\.{1,2}\/[^']+)\.js'/g, (match, spec: string) => {
        pending.push(path.posix.normalize(path.posix.join(path.posix.dirname(rel), `${spec}.ts`)));
        return match;
      })
      .replace(/from 'better-sqlite3'/g, `from '${betterSqlite}'`)
      // Lazily required packages (the tokenizer) resolve from this repo, not the temp dir.
      .replace(
        /createRequire\(import\.meta\.url\)/g,
        `createRequire(${JSON.stringify(pathToFileURL(path.join(SRC_DIR, rel)).href)})`,
      );
    const out = path.join(outDir, rel.replace(/\.ts$/, '.js'));
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, js);
  }
  fs.writeFileSync(path.join(outDir, 'package.json'), '{ "type": "module" }\n');
  const workerFile = path.join(outDir, 'worker.js');
  fs.writeFileSync(
    workerFile,
    `import { parentPort, workerData } from 'node:worker_threads';
import { SqliteStore } from './store/sqlite/sqlite-store.js';
const { job, start } = workerData;
const store = new SqliteStore(job.dbPath);
parentPort.postMessage({ type: 'ready' });
Atomics.wait(new Int32Array(start), 0, 0);
const errors = [];
const won = [];
let appended = 0;
for (let i = 0; i < job.rounds; i++) {
  try {
    await store.appendMessages(job.sessionId, [
      { role: 'user', content: job.tag + ' question ' + i },
      { role: 'assistant', content: job.tag + ' answer ' + i },
    ], { usage: { input_tokens: 1, output_tokens: 2 } });
    appended += 1;
  } catch (err) {
    errors.push(String(err && err.code) + ': ' + String(err && err.message));
  }
  const taskId = job.taskIds[i % job.taskIds.length];
  try {
    const row = await store.transitionTask(taskId, ['waiting'], { status: 'running', question: null });
    if (row) won.push(taskId);
  } catch (err) {
    errors.push(String(err && err.code) + ': ' + String(err && err.message));
  }
}
await store.close();
parentPort.postMessage({ type: 'done', result: { appended, errors, won } });
`,
  );
  return workerFile;
}

/** Starts one worker per job, releases them together, and collects their results. */
async function runWorkers(workerFile: string, jobs: WorkerJob[]): Promise<WorkerResult[]> {
  const start = new SharedArrayBuffer(4);
  const workers = jobs.map((job) => new Worker(workerFile, { workerData: { job, start } }));
  let ready = 0;
  const results = workers.map(
    (worker) =>
      new Promise<WorkerResult>((resolve, reject) => {
        worker.on('message', (message: { type: string; result?: WorkerResult }) => {
          if (message.type === 'ready') {
            ready += 1;
            if (ready === workers.length) {
              Atomics.store(new Int32Array(start), 0, 1);
              Atomics.notify(new Int32Array(start), 0);
            }
          } else if (message.type === 'done' && message.result) {
            resolve(message.result);
          }
        });
        worker.on('error', reject);
        worker.on('exit', (code) => {
          if (code !== 0) reject(new Error(`worker exited with code ${code}`));
        });
      }),
  );
  try {
    return await Promise.all(results);
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}
