/**
 * The message embeddings of the Postgres store (migration 021), as SQLite's
 * (sqlite-vectors.ts) with the same bytes in a bytea: the backlog the
 * background embedder walks, its writes (tokens charged to the owner keys in
 * the same transaction), recall's incremental loads, export and import.
 */
import { usageDay } from '../records.js';
import {
  RECALL_CONTENT_CHARS,
  type LoadedVector,
  type MessageVector,
  type NewMessageVector,
  type RecallHit,
  type UnembeddedMessage,
  type VectorStore,
} from '../store.js';
import { vectorBytes, vectorOf } from '../vector-bytes.js';
import type { Queryable } from './open-pool.js';
import { chargeOwnersSql } from './pg-keys.js';

type Rows = <R extends Record<string, unknown>>(sql: string, params?: unknown[]) => Promise<R[]>;

export class PgVectors implements VectorStore {
  constructor(
    /** Runs `work` in one transaction on one pooled connection. */
    private readonly tx: <T>(work: (client: Queryable) => Promise<T>) => Promise<T>,
    private readonly rows: Rows,
  ) {}

  async unembeddedMessages(
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<UnembeddedMessage[]> {
    return this.rows<UnembeddedMessage & Record<string, unknown>>(
      `SELECT m.id, m.session_id, s.owner_key, m.seq,
         substr(m.content, 1, ${RECALL_CONTENT_CHARS}) AS content
       FROM messages m JOIN sessions s ON s.id = m.session_id
         LEFT JOIN message_vectors v ON v.message_id = m.id
       WHERE m.id > $1 AND m.role <> 'system' AND m.content IS NOT NULL AND btrim(m.content) <> ''
         AND (v.id IS NULL OR v.model <> $2 OR ($3::int >= 0 AND v.dimensions <> $3::int))
       ORDER BY m.id LIMIT $4`,
      [afterId, model, dimensions, limit],
    );
  }

  async saveVectors(
    vectors: readonly NewMessageVector[],
    charges: readonly { sessionId: string; tokens: number }[],
  ): Promise<void> {
    if (vectors.length === 0 && charges.length === 0) return;
    const ids = vectors.map((v) => v.messageId);
    await this.tx(async (c) => {
      if (vectors.length > 0) {
        // A re-embedded message's old row goes and a new one (a new id) comes,
        // so a loaded copy sees it as new; a message deleted meanwhile is skipped.
        await c.query('DELETE FROM message_vectors WHERE message_id = ANY($1::bigint[])', [ids]);
        await c.query(
          `INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
           SELECT m.id, m.session_id, m.seq, v.model, v.dimensions, v.vector
           FROM UNNEST($1::bigint[], $2::text[], $3::integer[], $4::bytea[])
             AS v(message_id, model, dimensions, vector)
           JOIN messages m ON m.id = v.message_id`,
          [
            ids,
            vectors.map((v) => v.model),
            vectors.map((v) => v.dimensions),
            vectors.map((v) => vectorBytes(v.vector)),
          ],
        );
      }
      const spent = charges.filter((charge) => charge.tokens > 0);
      if (spent.length > 0)
        await c.query(
          chargeOwnersSql(
            // One row per key: an upsert may not touch the same row twice.
            `(SELECT s.owner_key, SUM(u.tokens)::bigint AS tokens
              FROM UNNEST($1::text[], $2::bigint[]) AS u(id, tokens)
              JOIN sessions s ON s.id = u.id GROUP BY s.owner_key) AS owner`,
            '$3',
            'owner.tokens',
          ),
          [
            spent.map((charge) => charge.sessionId),
            spent.map((charge) => charge.tokens),
            usageDay(),
          ],
        );
    });
  }

  async loadVectors(
    sessionId: string,
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<LoadedVector[]> {
    const found = await this.rows<{ id: number; seq: number; vector: Buffer }>(
      `SELECT id, seq, vector FROM message_vectors
       WHERE session_id = $1 AND id > $2 AND model = $3 AND dimensions = $4
       ORDER BY id LIMIT $5`,
      [sessionId, afterId, model, dimensions, limit],
    );
    return found.map((row) => ({ id: row.id, seq: row.seq, vector: vectorOf(row.vector) }));
  }

  async listVectors(sessionId: string, afterSeq: number, limit: number): Promise<MessageVector[]> {
    const found = await this.rows<{
      seq: number;
      model: string;
      dimensions: number;
      vector: Buffer;
    }>(
      `SELECT seq, model, dimensions, vector FROM message_vectors
       WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
      [sessionId, afterSeq, limit],
    );
    return found.map((row) => ({ ...row, vector: vectorOf(row.vector) }));
  }

  async appendImportedVectors(sessionId: string, vectors: readonly MessageVector[]): Promise<void> {
    if (vectors.length === 0) return;
    await this.rows(
      `INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
       SELECT m.id, m.session_id, m.seq, v.model, v.dimensions, v.vector
       FROM UNNEST($2::integer[], $3::text[], $4::integer[], $5::bytea[])
         AS v(seq, model, dimensions, vector)
       JOIN messages m ON m.session_id = $1 AND m.seq = v.seq
       ON CONFLICT (message_id) DO NOTHING`,
      [
        sessionId,
        vectors.map((v) => v.seq),
        vectors.map((v) => v.model),
        vectors.map((v) => v.dimensions),
        vectors.map((v) => vectorBytes(v.vector)),
      ],
    );
  }

  async messagesAtSeqs(
    sessionId: string,
    seqs: readonly number[],
    maxSeq: number,
  ): Promise<RecallHit[]> {
    if (seqs.length === 0) return [];
    return this.rows<RecallHit & Record<string, unknown>>(
      `SELECT seq, role, substr(content, 1, ${RECALL_CONTENT_CHARS}) AS content, created_at
       FROM messages WHERE session_id = $1 AND seq = ANY($2::integer[]) AND seq <= $3
         AND role <> 'system' AND content IS NOT NULL`,
      [sessionId, [...seqs], maxSeq],
    );
  }
}

/** Inside a fork's transaction: the fork's messages get their source's vectors. */
export async function copyVectorsToFork(
  c: Queryable,
  forkId: string,
  sourceId: string,
  atSeq: number,
): Promise<void> {
  await c.query(
    `INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
     SELECT m.id, m.session_id, m.seq, v.model, v.dimensions, v.vector
     FROM message_vectors v JOIN messages m ON m.session_id = $1 AND m.seq = v.seq
     WHERE v.session_id = $2 AND v.seq <= $3 ORDER BY v.seq`,
    [forkId, sourceId, atSeq],
  );
}
