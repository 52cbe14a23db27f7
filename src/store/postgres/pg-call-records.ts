/**
 * The model-call records of the Postgres store (migration 010): the twin of
 * the SQLite one. Each method is one transaction (or one statement) that
 * awaits only its own queries.
 */
import { decodeCursor, encodeCursor } from '../records.js';
import {
  CHAIN_LINK_COLUMNS,
  MODEL_CALL_INSERT_COLUMNS,
  MODEL_CALL_SUMMARY_COLUMNS,
  chainRefs,
  modelCallValues,
  rebuildRequest,
  toModelCallSummary,
  type ChainLinkRecord,
  type ModelCallSummaryRecord,
} from '../model-call-rows.js';
import type {
  CallRecordStore,
  ModelCallFilter,
  ModelCallRecord,
  ModelCallSummary,
  NewModelCall,
  Page,
} from '../store.js';
import type { Queryable } from './open-pool.js';

const INSERT_CALL = `INSERT INTO model_calls (${MODEL_CALL_INSERT_COLUMNS.join(', ')})
  VALUES (${MODEL_CALL_INSERT_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`;

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
        await c.query(INSERT_CALL, modelCallValues(call).map(withoutNul));
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
    const where = ['session_id = $1'];
    const params: unknown[] = [sessionId];
    if (filter.role !== undefined) {
      params.push(filter.role);
      where.push(`role = $${params.length}`);
    }
    if (filter.cursor !== undefined) {
      const [createdAt, id] = decodeCursor(filter.cursor);
      params.push(createdAt, id);
      const at = params.length - 1;
      where.push(`(created_at < $${at} OR (created_at = $${at} AND id < $${at + 1}))`);
    }
    params.push(filter.limit + 1);
    const rows = await this.tx(
      async (c) =>
        (
          await c.query<ModelCallSummaryRecord>(
            `SELECT ${MODEL_CALL_SUMMARY_COLUMNS} FROM model_calls WHERE ${where.join(' AND ')}
             ORDER BY created_at DESC, id DESC LIMIT $${params.length}`,
            params,
          )
        ).rows,
    );
    const items = rows.slice(0, filter.limit);
    const last = items[items.length - 1];
    return {
      items: items.map(toModelCallSummary),
      nextCursor:
        rows.length > filter.limit && last ? encodeCursor(last.created_at, last.id) : null,
    };
  }

  async findModelCall(id: string): Promise<ModelCallRecord | undefined> {
    // One transaction: a prune between the reads cannot break the chain.
    return this.tx(async (c) => {
      const found = await c.query<ModelCallSummaryRecord & { chain_id: string }>(
        `SELECT ${MODEL_CALL_SUMMARY_COLUMNS}, chain_id FROM model_calls WHERE id = $1`,
        [id],
      );
      const row = found.rows[0];
      if (!row) return undefined;
      const links = await c.query<ChainLinkRecord>(
        `SELECT ${CHAIN_LINK_COLUMNS} FROM model_calls WHERE chain_id = $1`,
        [row.chain_id],
      );
      const { refs, link } = chainRefs(id, links.rows);
      const blobRows = await c.query<{ hash: string; body: string }>(
        'SELECT hash, body FROM model_call_blobs WHERE session_id = $1 AND hash = ANY($2)',
        [row.session_id, [...new Set([...refs, link.params_ref])]],
      );
      const blobs = new Map(blobRows.rows.map((blob) => [blob.hash, blob.body]));
      const request = rebuildRequest(blobs.get(link.params_ref) ?? '{}', refs, blobs);
      const { chain_id: _chain, ...summary } = row;
      return { ...toModelCallSummary(summary), request, wire: link.wire === 1 };
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
