/**
 * Seeds the bench database with long sessions whose old messages are a
 * compacted prefix, the state defaultCompaction leaves behind: a summary on
 * the session row, `compact_size`/`compact_seq` pointing at the last
 * compacted message, and only the last `tail` raw messages after it.
 *
 * Run as a child process (`node dist-bench/bench/seed.js <db> <SeedRequest json>`)
 * so its allocations never show in the measured server's RSS. Sessions are
 * created through the real `SqliteStore` (the compiled one in dist/, the
 * build the bench measures); the bulk rows go in through its `db` handle with
 * one prepared INSERT in large transactions (the history-index queue trigger
 * included), and the queue is indexed before the seeder exits, as a server
 * would have indexed it over time: the measured runs never pay that catch-up.
 * Prints the created session ids as JSON: one array per plan entry.
 */
import type { SqliteStore as SqliteStoreClass } from '../src/store/sqlite/sqlite-store.js';

const ROWS_PER_TRANSACTION = 20_000;

export interface SeedRequest {
  /** The agent the sessions belong to, and its system prompt (stored as seq 1). */
  agentName: string;
  systemPrompt: string;
  /** Raw messages left after the compacted prefix. */
  tail: number;
  plan: {
    /** Non-system messages per session (even, so the tail starts with a user message). */
    messages: number;
    sessions: number;
  }[];
}

const WORDS = (
  'the a deploy build cache queue user order invoice agent session compact summary token ' +
  'window retry timeout error report schedule daemon memory note search index tail pointer ' +
  'server client request reply model tool call result budget latency shard replica'
).split(' ');

/** Deterministic filler text of ~100–200 characters. */
function text(i: number): string {
  let state = (i * 2654435761) >>> 0;
  const words: string[] = [`message ${i}:`];
  const count = 16 + (i % 16);
  for (let w = 0; w < count; w++) {
    state = (state * 1103515245 + 12345) >>> 0;
    words.push(WORDS[state % WORDS.length]!);
  }
  return words.join(' ');
}

const SUMMARY =
  'Summary of the earlier conversation: the user is planning a deploy of the billing service, ' +
  'asked about cache invalidation and retry budgets, and decided to ship on Friday.';

async function seed(dbPath: string, request: SeedRequest): Promise<string[][]> {
  const { SqliteStore } = (await import(
    new URL('../../dist/store/sqlite/sqlite-store.js', import.meta.url).href
  )) as { SqliteStore: typeof SqliteStoreClass };
  // It writes around the store's writer, so no commit would call a background checkpoint.
  const store = new SqliteStore(dbPath, { checkpoints: 'inline' });
  const insert = store.db.prepare(`INSERT INTO messages
    (session_id, seq, role, content, created_at) VALUES (?, ?, ?, ?, ?)`);
  const compact = store.db.prepare(`UPDATE sessions SET message_count = message_count + ?,
    last_seq = ?, compact_summary = ?, compact_size = ?, compact_seq = ?, compaction_count = 1
    WHERE id = ?`);
  const createdAt = new Date().toISOString();
  const ids: string[][] = [];
  for (const entry of request.plan) {
    if (entry.messages % 2 !== 0 || request.tail % 2 !== 0 || entry.messages < request.tail) {
      throw new Error(`seed: ${entry.messages} messages, tail ${request.tail}: need even counts`);
    }
    const group: string[] = [];
    for (let s = 0; s < entry.sessions; s++) {
      const session = await store.createSession({
        agentName: request.agentName,
        mode: 'chat',
        compactCount: 50,
        systemPrompt: request.systemPrompt,
      });
      // seq 1 is the system prompt; conversation messages are seq 2 … messages + 1.
      for (let start = 0; start < entry.messages; start += ROWS_PER_TRANSACTION) {
        const end = Math.min(start + ROWS_PER_TRANSACTION, entry.messages);
        store.db.transaction(() => {
          for (let i = start; i < end; i++) {
            insert.run(session.id, i + 2, i % 2 === 0 ? 'user' : 'assistant', text(i), createdAt);
          }
        })();
      }
      const compacted = entry.messages - request.tail;
      compact.run(
        entry.messages,
        entry.messages + 1,
        SUMMARY,
        compacted,
        compacted + 1,
        session.id,
      );
      group.push(session.id);
    }
    ids.push(group);
  }
  await store.indexHistory();
  store.db.pragma('wal_checkpoint(TRUNCATE)');
  await store.close();
  return ids;
}

const [dbPath, requestJson] = process.argv.slice(2);
if (dbPath === undefined || requestJson === undefined) {
  throw new Error('usage: node dist-bench/bench/seed.js <db-path> <SeedRequest json>');
}
const ids = await seed(dbPath, JSON.parse(requestJson) as SeedRequest);
process.stdout.write(`${JSON.stringify(ids)}\n`);
