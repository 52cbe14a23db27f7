/**
 * The model-call records of the SQLite store (migration 010): written in
 * batches off the turn, listed by keyset pages, rebuilt from their chain, and
 * pruned a few chains per transaction. The rows, pages and request rebuild
 * are model-call-rows.ts's, shared with Postgres. Statements are prepared
 * once, typed with their parameters and rows.
 */
import { newestFirstQuery } from '../decisions.js';
import {
  CHAIN_LINK_COLUMNS,
  MODEL_CALL_INSERT_COLUMNS,
  MODEL_CALL_SUMMARY_COLUMNS,
  chainRefs,
  modelCallValues,
  toModelCallPage,
  toModelCallRecord,
  wantedBlobs,
  type ChainLinkRecord,
  type FoundCallRecord,
  type ModelCallSummaryRecord,
} from '../model-call-rows.js';
import type { CallRecordStore, ModelCallFilter, ModelCallRecord, Page } from '../store.js';
import type { ModelCallSummary, NewModelCall } from '../store.js';
import type { SqliteDatabase } from './open-database.js';

/** A blob of a recorded request, as selected. */
interface BlobRecord {
  hash: string;
  body: string;
}

function prepare(db: SqliteDatabase) {
  return {
    sessionExists: db.prepare<[string], 1>('SELECT 1 FROM sessions WHERE id = ?').pluck(),
    insertBlob: db.prepare(
      'INSERT OR IGNORE INTO model_call_blobs (session_id, hash, body) VALUES (?, ?, ?)',
    ),
    insertCall: db.prepare(
      `INSERT INTO model_calls (${MODEL_CALL_INSERT_COLUMNS.join(', ')})
       VALUES (${MODEL_CALL_INSERT_COLUMNS.map(() => '?').join(', ')})`,
    ),
    addCost: db.prepare('UPDATE sessions SET cost = cost + ? WHERE id = ?'),
    findCall: db.prepare<[string], FoundCallRecord>(
      `SELECT ${MODEL_CALL_SUMMARY_COLUMNS}, chain_id FROM model_calls WHERE id = ?`,
    ),
    chain: db.prepare<[string], ChainLinkRecord>(
      `SELECT ${CHAIN_LINK_COLUMNS} FROM model_calls WHERE chain_id = ?`,
    ),
    oldChains: db.prepare<{ before: string; max: number }, { id: string; session_id: string }>(
      `SELECT c.id, c.session_id FROM model_calls c
       WHERE c.base_call_id IS NULL AND c.created_at < @before
         AND NOT EXISTS (SELECT 1 FROM model_calls d WHERE d.chain_id = c.id AND d.created_at >= @before)
       ORDER BY c.created_at LIMIT @max`,
    ),
    deleteChain: db.prepare('DELETE FROM model_calls WHERE chain_id = ?'),
    deleteUnusedBlobs: db.prepare(
      `DELETE FROM model_call_blobs WHERE session_id = @session
       AND NOT EXISTS (SELECT 1 FROM model_calls WHERE session_id = @session)`,
    ),
  };
}

export class SqliteCallRecords implements CallRecordStore {
  private readonly stmt: ReturnType<typeof prepare>;

  constructor(
    private readonly db: SqliteDatabase,
    /** The store's writer: runs one synchronous unit of work in a committed transaction. */
    private readonly write: <T>(work: () => T) => Promise<T>,
  ) {
    this.stmt = prepare(db);
  }

  async appendModelCalls(calls: readonly NewModelCall[]): Promise<void> {
    if (calls.length === 0) return;
    await this.write(() => this.insertCalls(calls));
  }

  /**
   * Inside the caller's transaction: the calls, their blobs and their
   * sessions' cost. A call of a session that no longer exists is dropped;
   * `existing` is a session the caller's transaction has just written to.
   */
  insertCalls(calls: readonly NewModelCall[], existing?: string): void {
    for (const call of calls) {
      if (
        call.session_id !== existing &&
        this.stmt.sessionExists.get(call.session_id) === undefined
      )
        continue;
      for (const blob of call.blobs)
        this.stmt.insertBlob.run(call.session_id, blob.hash, blob.body);
      this.stmt.insertCall.run(...modelCallValues(call));
      if (call.cost !== null && call.cost !== 0) this.stmt.addCost.run(call.cost, call.session_id);
    }
  }

  async addSessionCost(sessionId: string, cost: number): Promise<void> {
    await this.write(() => this.stmt.addCost.run(cost, sessionId));
  }

  async listModelCalls(
    sessionId: string,
    filter: ModelCallFilter,
  ): Promise<Page<ModelCallSummary>> {
    const equals = { session_id: sessionId, role: filter.role };
    const select = `SELECT ${MODEL_CALL_SUMMARY_COLUMNS} FROM model_calls`;
    const query = newestFirstQuery(select, equals, filter, () => '?');
    const rows = this.db.prepare<unknown[], ModelCallSummaryRecord>(query.sql).all(...query.params);
    return toModelCallPage(rows, filter.limit);
  }

  async findModelCall(id: string): Promise<ModelCallRecord | undefined> {
    // One read transaction: a prune between the reads cannot break the chain.
    return this.db.transaction(() => {
      const row = this.stmt.findCall.get(id);
      if (!row) return undefined;
      const chain = chainRefs(id, this.stmt.chain.all(row.chain_id));
      const wanted = wantedBlobs(chain);
      const blobs = new Map<string, string>();
      // Chunks stay under SQLite's bound-parameter limit.
      for (let i = 0; i < wanted.length; i += 500) {
        const chunk = wanted.slice(i, i + 500);
        const found = this.db
          .prepare<unknown[], BlobRecord>(
            `SELECT hash, body FROM model_call_blobs WHERE session_id = ? AND hash IN (${chunk.map(() => '?').join(', ')})`,
          )
          .all(row.session_id, ...chunk);
        for (const blob of found) blobs.set(blob.hash, blob.body);
      }
      return toModelCallRecord(row, chain, blobs);
    })();
  }

  async pruneModelCalls(before: string, maxChains: number): Promise<number> {
    return this.write(() => {
      const chains = this.stmt.oldChains.all({ before, max: maxChains });
      let deleted = 0;
      for (const chain of chains) deleted += this.stmt.deleteChain.run(chain.id).changes;
      for (const session of new Set(chains.map((c) => c.session_id)))
        this.stmt.deleteUnusedBlobs.run({ session });
      return deleted;
    });
  }
}
