/**
 * The model-call records of the Postgres store (migration 010). The rows,
 * pages and request rebuild are model-call-rows.ts's, shared with SQLite;
 * each method here is one transaction (or one statement) that awaits only
 * its own queries.
 */
import { newestFirstQuery } from '../decisions.js';
import * as rows from '../model-call-rows.js';
import type {
  ChainLinkRecord,
  FoundCallRecord,
  ModelCallSummaryRecord,
} from '../model-call-rows.js';
import type { CallRecordStore, ModelCallFilter, NewModelCall } from '../store.js';
import type { ModelCallRecord, ModelCallSummary, Page } from '../store.js';
import type { Queryable } from './open-pool.js';

const INSERT_CALL = `INSERT INTO model_calls (${rows.MODEL_CALL_INSERT_COLUMNS.join(', ')})
  VALUES (${rows.MODEL_CALL_INSERT_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`;

/** Postgres text cannot hold U+0000 (an error message could carry one). */
function withoutNul(value: unknown): unknown {
  return typeof value === 'string' ? value.replaceAll('\u0000', '\uFFFD') : value;
}

export class PgCallRecords implements CallRecordStore {
  constructor(
    /** Runs `work` in one transaction on one pooled connection. */
    private readonly tx: <T>(work: (client: Queryable) => Promise<T>) => Promise<T>,
  ) {}

  async appendModelCalls(calls: readonly NewModelCall[]): Promise<void> {
    if (calls.length === 0) return;
    await this.tx(async (c) => {
      // Key-share locks: a session deleted meanwhile is skipped, not an FK error.
      const ids = [...new Set(calls.map((call) => call.session_id))];
      const live = await c.query<{ id: string }>(
        'SELECT id FROM sessions WHERE id = ANY($1) FOR KEY SHARE',
        [ids],
      );
      const existing = new Set(live.rows.map((row) => row.id));
      for (const call of calls) {
        if (!existing.has(call.session_id)) continue;
        if (call.blobs.length > 0) {
          await c.query(
            `INSERT INTO model_call_blobs (session_id, hash, body)
             SELECT $1, b.hash, b.body FROM unnest($2::text[], $3::text[]) AS b(hash, body)
             ON CONFLICT DO NOTHING`,
            [call.session_id, call.blobs.map((b) => b.hash), call.blobs.map((b) => b.body)],
          );
        }
        await c.query(INSERT_CALL, rows.modelCallValues(call).map(withoutNul));
        if (call.cost !== null && call.cost !== 0)
          await c.query('UPDATE sessions SET cost = cost + $1 WHERE id = $2', [
            call.cost,
            call.session_id,
          ]);
      }
    });
  }

  async addSessionCost(sessionId: string, cost: number): Promise<void> {
    await this.tx((c) =>
      c.query('UPDATE sessions SET cost = cost + $1 WHERE id = $2', [cost, sessionId]),
    );
  }

  async listModelCalls(
    sessionId: string,
    filter: ModelCallFilter,
  ): Promise<Page<ModelCallSummary>> {
    const equals = { session_id: sessionId, role: filter.role };
    const select = `SELECT ${rows.MODEL_CALL_SUMMARY_COLUMNS} FROM model_calls`;
    const query = newestFirstQuery(select, equals, filter, (n) => `$${n}`);
    const found = await this.tx(
      async (c) => (await c.query<ModelCallSummaryRecord>(query.sql, query.params)).rows,
    );
    return rows.toModelCallPage(found, filter.limit);
  }

  async findModelCall(id: string): Promise<ModelCallRecord | undefined> {
    // One transaction: a prune between the reads cannot break the chain.
    return this.tx(async (c) => {
      const found = await c.query<FoundCallRecord>(
        `SELECT ${rows.MODEL_CALL_SUMMARY_COLUMNS}, chain_id FROM model_calls WHERE id = $1`,
        [id],
      );
      const row = found.rows[0];
      if (!row) return undefined;
      const links = await c.query<ChainLinkRecord>(
        `SELECT ${rows.CHAIN_LINK_COLUMNS} FROM model_calls WHERE chain_id = $1`,
        [row.chain_id],
      );
      const chain = rows.chainRefs(id, links.rows);
      const blobRows = await c.query<{ hash: string; body: string }>(
        'SELECT hash, body FROM model_call_blobs WHERE session_id = $1 AND hash = ANY($2)',
        [row.session_id, rows.wantedBlobs(chain)],
      );
      const blobs = new Map(blobRows.rows.map((blob) => [blob.hash, blob.body]));
      return rows.toModelCallRecord(row, chain, blobs);
    });
  }

  async pruneModelCalls(before: string, maxChains: number): Promise<number> {
    return this.tx(async (c) => {
      const chains = await c.query<{ id: string; session_id: string }>(
        `SELECT c.id, c.session_id FROM model_calls c
         WHERE c.base_call_id IS NULL AND c.created_at < $1
           AND NOT EXISTS (SELECT 1 FROM model_calls d WHERE d.chain_id = c.id AND d.created_at >= $1)
         ORDER BY c.created_at LIMIT $2`,
        [before, maxChains],
      );
      if (chains.rows.length === 0) return 0;
      const deleted = await c.query('DELETE FROM model_calls WHERE chain_id = ANY($1)', [
        chains.rows.map((chain) => chain.id),
      ]);
      await c.query(
        `DELETE FROM model_call_blobs b WHERE b.session_id = ANY($1)
         AND NOT EXISTS (SELECT 1 FROM model_calls m WHERE m.session_id = b.session_id)`,
        [[...new Set(chains.rows.map((chain) => chain.session_id))]],
      );
      return deleted.rowCount ?? 0;
    });
  }
}
