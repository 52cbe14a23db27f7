/**
 * The model-call records of the Postgres store (migration 010). The rows,
 * pages and request rebuild are model-call-rows.ts's, shared with SQLite;
 * each method here is one transaction (or one statement) that awaits only
 * its own queries; the append of a turn's calls is one statement.
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
import { prepared } from './prepared.js';

/** Postgres text cannot hold U+0000 (an error message could carry one). */
function withoutNul(value: unknown): unknown {
  return typeof value === 'string' ? value.replaceAll('\u0000', '\uFFFD') : value;
}

/** The calls as rows of `model_calls` in the JSON that `json_populate_recordset` reads. */
export function modelCallsJson(calls: readonly NewModelCall[]): string {
  const columns = rows.MODEL_CALL_INSERT_COLUMNS;
  return JSON.stringify(
    calls.map((call) => {
      const values = rows.modelCallValues(call).map(withoutNul);
      return Object.fromEntries(columns.map((column, i) => [column, values[i]]));
    }),
  );
}

export class PgCallRecords implements CallRecordStore {
  constructor(
    /** Runs `work` in one transaction on one pooled connection. */
    private readonly tx: <T>(work: (client: Queryable) => Promise<T>) => Promise<T>,
    /** Runs `work`, a single statement, committed on its own. */
    private readonly statement: <T>(work: (client: Queryable) => Promise<T>) => Promise<T>,
  ) {}

  async appendModelCalls(calls: readonly NewModelCall[]): Promise<void> {
    if (calls.length === 0) return;
    const blobs = calls.flatMap((call) =>
      call.blobs.map((blob) => ({ session_id: call.session_id, ...blob })),
    );
    const columns = rows.MODEL_CALL_INSERT_COLUMNS;
    // One statement, committed on its own: the calls, their blobs and the
    // sessions' cost. Key-share locks: a session deleted meanwhile is
    // skipped, not an FK error.
    await this.statement((c) =>
      c.query(
        prepared(
          `WITH live AS (SELECT id FROM sessions WHERE id = ANY($1::text[]) FOR KEY SHARE),
         blobs AS (
           INSERT INTO model_call_blobs (session_id, hash, body)
           SELECT b.session_id, b.hash, b.body
           FROM UNNEST($2::text[], $3::text[], $4::text[]) AS b(session_id, hash, body)
           WHERE b.session_id IN (SELECT id FROM live)
           ON CONFLICT DO NOTHING),
         calls AS (
           INSERT INTO model_calls (${columns.join(', ')})
           SELECT ${columns.map((column) => `r.${column}`).join(', ')}
           FROM json_populate_recordset(NULL::model_calls, $5::json) AS r
           WHERE r.session_id IN (SELECT id FROM live)
           RETURNING session_id, cost),
         costs AS (
           UPDATE sessions SET cost = sessions.cost + spent.cost
           FROM (SELECT session_id, SUM(cost) AS cost FROM calls
                 WHERE cost IS NOT NULL AND cost <> 0 GROUP BY session_id) AS spent
           WHERE sessions.id = spent.session_id)
         SELECT 1`,
          [
            [...new Set(calls.map((call) => call.session_id))],
            blobs.map((b) => b.session_id),
            blobs.map((b) => b.hash),
            blobs.map((b) => b.body),
            modelCallsJson(calls),
          ],
        ),
      ),
    );
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
