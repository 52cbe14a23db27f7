/**
 * The message embeddings of the SQLite store (migration 021): the backlog
 * the background embedder walks, the writes of what it computed (with the
 * tokens charged to each session's owner key in the same transaction), the
 * incremental loads of recall's in-memory copy, and the lines of an export
 * and an import. Statements are prepared once.
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
import type { SqliteDatabase } from './open-database.js';

interface VectorRecord {
  id: number;
  seq: number;
  model: string;
  dimensions: number;
  vector: Buffer;
}

function prepare(db: SqliteDatabase) {
  return {
    unembedded: db.prepare<
      { model: string; dimensions: number; after: number; limit: number },
      UnembeddedMessage
    >(`SELECT m.id, m.session_id, s.owner_key, m.seq,
        substr(m.content, 1, ${RECALL_CONTENT_CHARS}) AS content
      FROM messages m JOIN sessions s ON s.id = m.session_id
        LEFT JOIN message_vectors v ON v.message_id = m.id
      WHERE m.id > @after AND m.role <> 'system' AND m.content IS NOT NULL AND trim(m.content) <> ''
        AND (v.id IS NULL OR v.model <> @model OR (@dimensions >= 0 AND v.dimensions <> @dimensions))
      ORDER BY m.id LIMIT @limit`),
    // A re-embedded message's old row goes and a new one (a new id) comes, so a loaded copy sees it as new.
    drop: db.prepare('DELETE FROM message_vectors WHERE message_id = ?'),
    insert:
      db.prepare(`INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
      SELECT id, session_id, seq, @model, @dimensions, @vector FROM messages WHERE id = @message_id`),
    charge: db.prepare(`INSERT INTO key_usage (key_id, day, tokens)
      SELECT owner_key, @day, @tokens FROM sessions WHERE id = @id AND owner_key IS NOT NULL AND @tokens > 0
      ON CONFLICT (key_id, day) DO UPDATE SET tokens = tokens + excluded.tokens`),
    load: db.prepare<
      { session: string; model: string; dimensions: number; after: number; limit: number },
      { id: number; seq: number; vector: Buffer }
    >(`SELECT id, seq, vector FROM message_vectors
      WHERE session_id = @session AND id > @after AND model = @model AND dimensions = @dimensions
      ORDER BY id LIMIT @limit`),
    list: db.prepare<[string, number, number], VectorRecord>(
      `SELECT id, seq, model, dimensions, vector FROM message_vectors
       WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
    ),
    imported:
      db.prepare(`INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
      SELECT id, session_id, seq, @model, @dimensions, @vector FROM messages
      WHERE session_id = @session AND seq = @seq
      ON CONFLICT (message_id) DO NOTHING`),
    atSeqs: db.prepare<[string, string, number], RecallHit>(`SELECT m.seq AS seq, m.role AS role,
        substr(m.content, 1, ${RECALL_CONTENT_CHARS}) AS content, m.created_at AS created_at
      FROM json_each(?) j CROSS JOIN messages m ON m.session_id = ? AND m.seq = j.value
      WHERE m.seq <= ? AND m.role <> 'system' AND m.content IS NOT NULL`),
    copyFork:
      db.prepare(`INSERT INTO message_vectors (message_id, session_id, seq, model, dimensions, vector)
      SELECT m.id, m.session_id, m.seq, v.model, v.dimensions, v.vector
      FROM message_vectors v JOIN messages m ON m.session_id = @id AND m.seq = v.seq
      WHERE v.session_id = @source AND v.seq <= @at_seq ORDER BY v.seq`),
  };
}

export class SqliteVectors implements VectorStore {
  private readonly stmt: ReturnType<typeof prepare>;

  constructor(
    db: SqliteDatabase,
    /** Runs `work` (synchronous SQL) as one committed write. */
    private readonly write: <T>(work: () => T) => Promise<T>,
  ) {
    this.stmt = prepare(db);
  }

  async unembeddedMessages(
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<UnembeddedMessage[]> {
    return this.stmt.unembedded.all({ model, dimensions, after: afterId, limit });
  }

  async saveVectors(
    vectors: readonly NewMessageVector[],
    charges: readonly { sessionId: string; tokens: number }[],
  ): Promise<void> {
    if (vectors.length === 0 && charges.length === 0) return;
    const rows = vectors.map((v) => ({
      message_id: v.messageId,
      model: v.model,
      dimensions: v.dimensions,
      vector: vectorBytes(v.vector),
    }));
    const day = usageDay();
    await this.write(() => {
      for (const row of rows) {
        this.stmt.drop.run(row.message_id);
        this.stmt.insert.run(row);
      }
      for (const charge of charges)
        this.stmt.charge.run({ id: charge.sessionId, day, tokens: charge.tokens });
    });
  }

  async loadVectors(
    sessionId: string,
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<LoadedVector[]> {
    return this.stmt.load
      .all({ session: sessionId, model, dimensions, after: afterId, limit })
      .map((row) => ({ id: row.id, seq: row.seq, vector: vectorOf(row.vector) }));
  }

  async listVectors(sessionId: string, afterSeq: number, limit: number): Promise<MessageVector[]> {
    return this.stmt.list.all(sessionId, afterSeq, limit).map((row) => ({
      seq: row.seq,
      model: row.model,
      dimensions: row.dimensions,
      vector: vectorOf(row.vector),
    }));
  }

  async appendImportedVectors(sessionId: string, vectors: readonly MessageVector[]): Promise<void> {
    if (vectors.length === 0) return;
    const rows = vectors.map((v) => ({
      session: sessionId,
      seq: v.seq,
      model: v.model,
      dimensions: v.dimensions,
      vector: vectorBytes(v.vector),
    }));
    await this.write(() => {
      for (const row of rows) this.stmt.imported.run(row);
    });
  }

  async messagesAtSeqs(
    sessionId: string,
    seqs: readonly number[],
    maxSeq: number,
  ): Promise<RecallHit[]> {
    if (seqs.length === 0) return [];
    return this.stmt.atSeqs.all(JSON.stringify(seqs), sessionId, maxSeq);
  }

  /** Inside the fork's transaction: the fork's messages get their source's vectors. */
  copyToFork(params: { id: string; source: string; at_seq: number }): void {
    this.stmt.copyFork.run(params);
  }
}
