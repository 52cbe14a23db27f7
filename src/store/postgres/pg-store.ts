/**
 * The Postgres implementation of `Store` (node-postgres, pooled). Each method
 * is one transaction on one pooled connection that awaits only its own
 * statements, committed before the returned promise resolves. Where SQLite's
 * single writer makes read-then-write safe, this store locks the session row
 * (`FOR UPDATE`) first, so concurrent instances serialise per session: seqs
 * never collide, compare-and-set compaction stays exact. An append is the
 * exception: one statement that writes only if the session's log still ends
 * where this store last saw it, and locks the row only when it does not
 * (pg-append.ts). Event inserts take a transaction-scoped advisory lock so
 * event ids become visible in id order and a reader paging by `afterId` never
 * skips one that commits late. What both dialects decide the same way (the
 * compaction precondition, the transcript chain, keyset pages) lives in
 * ../decisions.ts; this file holds the SQL.
 */
import type pg from 'pg';
import type { ChatMessage, StoredMessage } from '../../llm/messages.js';
import { estimateMessageTokens } from '../../llm/tokens.js';
import type * as store from '../store.js';
import { ADMIN_OWNER, evidenceWords, RECALL_CONTENT_CHARS } from '../store.js';
import { PgCallRecords } from './pg-call-records.js';
import { chargeSessionTokens, PgKeys } from './pg-keys.js';
import { copyVectorsToFork, PgVectors } from './pg-vectors.js';
import {
  StoreBase,
  type FinishedRun,
  type PendingAppend,
  type RecallRead,
  type RecallSearch,
  type RecallShortlist,
} from '../store-base.js';
import { sessionNotFound } from '../session-not-found.js';
import { SessionMovedError } from '../session-moved.js';
import { requireRunningTask } from '../task-taken-over.js';
import * as decide from '../decisions.js';
import { newId, now } from '../records.js';
import * as records from '../records.js';
import { inverseFrequency } from '../recall-rank.js';
import { stemOf, stemPrefix } from '../stem.js';
import {
  countWords,
  deletionKeys,
  MAX_CANDIDATES,
  queryKeys,
  VOCABULARY_BATCH,
  type KnownWord,
} from '../vocabulary.js';
import {
  countSessionStems,
  MESSAGES_STEM,
  stemRange,
  type CountedMessage,
} from './session-stems.js';
import { DEFAULT_POOL_SIZE } from '../../config/settings.js';
import {
  inStatement,
  inTransaction,
  migratePostgres,
  openPool,
  queryRows,
  type PoolOptions,
  type Queryable,
} from './open-pool.js';
import {
  appendAt,
  insertEvents,
  insertMessageRows,
  pgText,
  SessionHeads,
  type Appended,
  type AppendWrite,
  type SessionHead,
} from './pg-append.js';

/** The columns that name one front-end chat, as `$1`…`$5`. */
const PG_FRONT_END_CHAT_MATCH =
  'protocol = $1 AND key_id = $2 AND end_user = $3 AND agent_name = $4 AND chat_id = $5';

/** How often a bind retries when the chat it lost to is deleted before it reads it. */
const BIND_ATTEMPTS = 3;

const MEMORY_COLUMNS = 'agent_name, key, content, created_at, updated_at';

/** Messages whose split words one backfill batch sets (migration 027). */
export const WORDS_BATCH = 2_000;

/** Recall on Postgres: a common word's candidates are the session's newest this many messages. */
const PG_RECALL_WINDOW = 400;
/** A word held by fewer than this share of the session's messages is read whole through GIN… */
const PG_RARE_SHARE = 0.025;
/** …or by fewer than this many, in a short session. */
const PG_RARE_MESSAGES = 10;
/** How much more the rarer words' rank counts than every word's. */
const PG_RARE_WEIGHT = 10;
/**
 * Free text as a tsquery that cannot be a syntax error: the same words as the
 * SQLite store's FTS5 query, each a quoted lexeme, OR-ed.
 */
function toTsQuery(text: string): string | undefined {
  const words = records.searchWords(text);
  return words.length === 0 ? undefined : words.map(lexeme).join(' | ');
}

/**
 * A word as a tsquery operand: quoted; a word with an underscore as the
 * phrase of its parts, which is how the parser stores it (`api_key` is
 * `'api' <-> 'key'`; SQLite keeps it whole, and the rows found are checked by
 * word after).
 */
function lexeme(word: string): string {
  const parts = word.split('_').filter((part) => part !== '');
  return parts.length > 1
    ? `(${parts.map((part) => `'${part}'`).join(' <-> ')})`
    : `'${parts[0] ?? word}'`;
}

/**
 * The condition that `alias`'s row holds `query`: by its split words
 * (migration 027), or, until every row has them, by the generated
 * `search` column where `words` is not yet set.
 */
function holds(alias: string, query: string, wordsComplete: boolean): string {
  return wordsComplete
    ? `${alias}.words @@ ${query}`
    : `(${alias}.words @@ ${query} OR (${alias}.words IS NULL AND ${alias}.search @@ ${query}))`;
}

/** A row's searchable words: the split words, or the generated column until they are set. */
const rowWords = (alias: string): string => `COALESCE(${alias}.words, ${alias}.search)`;

/** ts_headline options: the match in [brackets], one short fragment, like FTS5's snippet(). */
const HEADLINE =
  'StartSel="[", StopSel="]", MaxWords=16, MinWords=4, MaxFragments=1, FragmentDelimiter="…"';

export interface PgStoreOptions extends PoolOptions {
  /** Apply pending migrations at open (default true; `cairn migrate` does it explicitly). */
  migrate?: boolean;
  /** The owner of every task this store sets running, so recovery spares a live peer's tasks. */
  instanceId?: string;
  /**
   * Find typo corrections with `pg_trgm` when the extension can be created
   * (default true); false, or an extension that cannot be had, uses the
   * deletion keys SQLite uses (store/vocabulary.ts).
   */
  trigrams?: boolean;
}

/** How recall's typo correction finds a word's stored neighbours on Postgres. */
export type WordMatching = 'trigrams' | 'deletion-keys';

/**
 * `pg_trgm` and a trigram index on the vocabulary's words, if both can be
 * had: creating the extension needs a right the database user may lack, and
 * the extension may be missing from the server; either way the answer is the
 * fallback, never a failed start.
 */
async function trigramMatching(pool: pg.Pool): Promise<WordMatching> {
  const attempt = async (sql: string) => {
    try {
      await pool.query(sql);
      return true;
    } catch {
      return false;
    }
  };
  await attempt('CREATE EXTENSION IF NOT EXISTS pg_trgm');
  await attempt(
    'CREATE INDEX IF NOT EXISTS history_words_trigrams ON history_words USING gin (word gin_trgm_ops)',
  );
  const works = await attempt("SELECT 1 FROM history_words WHERE word % 'probe' LIMIT 1");
  return works ? 'trigrams' : 'deletion-keys';
}

export class PgStore extends StoreBase implements store.Store {
  readonly kind = 'postgres' as const;
  readonly pool: pg.Pool;
  private readonly poolSize: number;
  private closed = false;

  private readonly instanceId: string | null;
  protected readonly calls: PgCallRecords;
  protected readonly keys: PgKeys;
  protected readonly vectors: PgVectors;
  /** Where each session's log ends, as last seen: lets an append skip locking the row. */
  private readonly heads = new SessionHeads();
  /** Whether every message has its split words (migration 027); until then searches fall back. */
  private wordsComplete = false;

  private constructor(
    pool: pg.Pool,
    poolSize: number,
    instanceId: string | null,
    /** How typo correction finds candidates here. */
    readonly wordMatching: WordMatching,
  ) {
    super();
    this.pool = pool;
    this.poolSize = poolSize;
    this.instanceId = instanceId;
    this.calls = new PgCallRecords(
      (work) => this.tx(work),
      (work) => this.statement(work),
    );
    this.keys = new PgKeys((sql, params) => this.rows(sql, params));
    this.vectors = new PgVectors(
      (work) => this.tx(work),
      (sql, params) => this.rows(sql, params),
    );
  }

  /** Connects to `url` and migrates the database (instances starting at once are safe). */
  static async open(url: string, options: PgStoreOptions = {}): Promise<PgStore> {
    const poolSize = options.poolSize ?? DEFAULT_POOL_SIZE;
    const pool = openPool(url, options);
    let matching: WordMatching = 'deletion-keys';
    try {
      if (options.migrate !== false) await migratePostgres(pool);
      if (options.trigrams !== false) matching = await trigramMatching(pool);
    } catch (err) {
      await pool.end();
      throw err;
    }
    const opened = new PgStore(pool, poolSize, options.instanceId ?? null, matching);
    opened.catchUpVocabulary();
    opened.catchUpWords();
    return opened;
  }

  private tx<T>(work: (client: Queryable) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, this.poolSize, work);
  }

  /** `work`, a single statement, committed on its own (no BEGIN, no COMMIT). */
  private statement<T>(work: (client: Queryable) => Promise<T>): Promise<T> {
    return inStatement(this.pool, this.poolSize, work);
  }

  async ping(): Promise<void> {
    await this.rows('SELECT 1');
  }

  private rows<R extends pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<R[]> {
    return queryRows<R>(this.pool, this.poolSize, sql, params);
  }

  /** `rows`, planned with each call's values (see `queryRows`). */
  private rowsPlannedEach<R extends pg.QueryResultRow>(
    sql: string,
    params: unknown[],
  ): Promise<R[]> {
    return queryRows<R>(this.pool, this.poolSize, sql, params, true);
  }

  private async row<R extends pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
  ): Promise<R | undefined> {
    return (await this.rows<R>(sql, params))[0];
  }

  // ---- sessions -------------------------------------------------------------

  async createSession(input: store.NewSession): Promise<store.SessionRow> {
    const id = newId('sess');
    const createdAt = now();
    const system: ChatMessage[] = [{ role: 'system', content: input.systemPrompt }];
    const tokens = system.map(estimateMessageTokens);
    const origin = decide.sessionOrigin(input);
    return this.tx(async (c) => {
      await c.query(
        `INSERT INTO sessions
          (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at, compact_count,
           owner_key, end_user, transcript_hash)
         VALUES ($1, $2, $3, 'active', $4, $5, $6, $6, $7, $8, $9, $10)`,
        [
          id,
          input.agentName,
          input.mode,
          pgText(input.title ?? null),
          input.parentSessionId ?? null,
          createdAt,
          input.compactCount,
          origin.owner_key,
          pgText(origin.end_user),
          origin.transcript_hash,
        ],
      );
      await this.appendLocked(c, {
        sessionId: id,
        messages: system,
        tokens,
        options: {},
        createdAt,
      });
      return this.heads.note((await getSession(c, id))!);
    });
  }

  async findSession(id: string): Promise<store.SessionRow | undefined> {
    return this.heads.note(
      await this.row<store.SessionRow>('SELECT * FROM sessions WHERE id = $1', [id]),
    );
  }

  async findSessionByTranscript(
    agentName: string,
    transcriptHash: string,
    owner: store.Owner,
  ): Promise<store.SessionRow | undefined> {
    // Only the same key's, for the same end user: two users of one chat UI never share a session.
    return this.row<store.SessionRow>(
      `SELECT * FROM sessions WHERE agent_name = $1 AND transcript_hash = $2 AND status = 'active'
         AND owner_key IS NOT DISTINCT FROM $3 AND end_user IS NOT DISTINCT FROM $4
       ORDER BY updated_at DESC LIMIT 1`,
      [agentName, transcriptHash, owner.key, owner.user === null ? null : pgText(owner.user)],
    );
  }

  async listSessions(filter: store.SessionFilter): Promise<store.Page<store.SessionRow>> {
    const endUser = filter.endUser === undefined ? undefined : pgText(filter.endUser);
    const equals = decide.sessionFilterColumns({ ...filter, endUser });
    return this.newestFirst<store.SessionRow>('sessions', equals, filter);
  }

  async resetSession(id: string): Promise<store.SessionRow | undefined> {
    return this.tx(async (c) => {
      if ((await lockSession(c, id)) === undefined) return undefined;
      await c.query("DELETE FROM messages WHERE session_id = $1 AND role <> 'system'", [id]);
      await c.query('DELETE FROM compactions WHERE session_id = $1', [id]);
      await c.query('DELETE FROM history_session_stems WHERE session_id = $1', [id]);
      await c.query(
        `UPDATE sessions SET
           message_count = (SELECT COUNT(*) FROM messages WHERE session_id = $1),
           input_tokens = 0, output_tokens = 0, cache_read_tokens = 0, cache_write_tokens = 0,
           compaction_input_tokens = 0, compaction_output_tokens = 0,
           compact_summary = NULL, compact_size = 0, compact_seq = 0, compaction_count = 0,
           last_prompt_tokens = NULL, last_prompt_seq = NULL, compaction_suspended = 0,
           epoch = epoch + 1, transcript_hash = NULL, updated_at = $2
         WHERE id = $1`,
        [id, now()],
      );
      return this.heads.note(await getSession(c, id));
    });
  }

  async closeSession(id: string): Promise<store.SessionRow | undefined> {
    return this.tx(async (c) => {
      const result = await c.query<store.SessionRow>(
        "UPDATE sessions SET status = 'closed', updated_at = $2 WHERE id = $1 RETURNING *",
        [id, now()],
      );
      return result.rows[0];
    });
  }

  async deleteSession(id: string): Promise<boolean> {
    this.heads.forget(id);
    return this.tx(async (c) => {
      await c.query('DELETE FROM history_session_stems WHERE session_id = $1', [id]);
      return ((await c.query('DELETE FROM sessions WHERE id = $1', [id])).rowCount ?? 0) > 0;
    });
  }

  async updateSession(id: string, edit: store.SessionEdit): Promise<store.SessionRow | undefined> {
    return this.tx(async (c) => {
      const result = await c.query<store.SessionRow>(
        `UPDATE sessions SET
           title = CASE WHEN $2 THEN $3 ELSE title END,
           compact_count = COALESCE($4, compact_count),
           updated_at = $5
         WHERE id = $1 RETURNING *`,
        [
          id,
          edit.title !== undefined,
          pgText(edit.title ?? null),
          edit.compactCount ?? null,
          now(),
        ],
      );
      return result.rows[0];
    });
  }

  async createImportedSession(
    session: store.ImportedSession,
    owner: store.Owner = ADMIN_OWNER,
  ): Promise<string> {
    const id = newId('sess');
    await this.tx((c) =>
      c.query(
        `INSERT INTO sessions
          (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at,
           input_tokens, output_tokens, compact_summary, compact_size, compact_count, compaction_count,
           compact_seq, last_prompt_tokens, last_prompt_seq, compaction_suspended,
           compaction_input_tokens, compaction_output_tokens, cost, cache_read_tokens, cache_write_tokens,
           owner_key, end_user)
         VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
           $20, $21, $22, $23, $24)`,
        [
          id,
          session.agent_name,
          session.mode,
          session.status,
          pgText(session.title),
          session.created_at,
          session.updated_at,
          session.input_tokens,
          session.output_tokens,
          session.compact_summary,
          session.compact_size,
          session.compact_count,
          session.compaction_count,
          session.compact_seq,
          session.last_prompt_tokens,
          session.last_prompt_seq,
          session.compaction_suspended,
          session.compaction_input_tokens,
          session.compaction_output_tokens,
          session.cost,
          session.cache_read_tokens,
          session.cache_write_tokens,
          owner.key,
          pgText(owner.user ?? session.end_user ?? null),
        ],
      ),
    );
    return id;
  }

  async forkSession(id: string, atSeq?: number): Promise<store.ForkOutcome> {
    const forkId = newId('sess');
    return this.tx(async (c): Promise<store.ForkOutcome> => {
      // Locked, so no append or compaction of the parent lands between the copies.
      if ((await lockSession(c, id)) === undefined) return { kind: 'no-session' };
      const source = (await getSession(c, id))!;
      const found = await c.query<{ seq: number }>(
        atSeq === undefined
          ? 'SELECT MAX(seq) AS seq FROM messages WHERE session_id = $1'
          : 'SELECT seq FROM messages WHERE session_id = $1 AND seq = $2',
        atSeq === undefined ? [id] : [id, atSeq],
      );
      const at = found.rows[0]?.seq ?? null;
      if (at === null) return { kind: 'no-message' };
      const carry = at >= source.compact_seq;
      // The fork's row is made from its parent's: columns added to sessions later
      // (owners, say) are copied here, in this one statement.
      await c.query(
        `INSERT INTO sessions
           (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at,
            compact_count, compact_summary, compact_size, compaction_count, compact_seq, last_seq,
            owner_key, end_user)
         SELECT $1::text, agent_name, 'chat', 'active', title, NULL, $3::text, $3::text,
           compact_count, CASE WHEN $4::boolean THEN compact_summary END,
           CASE WHEN $4::boolean THEN compact_size ELSE 0 END,
           CASE WHEN $4::boolean THEN compaction_count ELSE 0 END,
           CASE WHEN $4::boolean THEN compact_seq ELSE 0 END, $5::integer, owner_key, end_user
         FROM sessions WHERE id = $2`,
        [forkId, id, now(), carry, at],
      );
      await c.query(
        `INSERT INTO messages
           (session_id, seq, role, content, tool_calls, tool_call_id, name, created_at, chars, tokens, transcript_hash, answers_seq)
         SELECT $1::text, seq, role, content, tool_calls, tool_call_id, name, created_at, chars, tokens, transcript_hash, answers_seq
         FROM messages WHERE session_id = $2 AND seq <= $3 ORDER BY seq`,
        [forkId, id, at],
      );
      await copyVectorsToFork(c, forkId, id, at);
      if (carry)
        await c.query(
          `INSERT INTO compactions
             (session_id, from_size, to_size, from_seq, to_seq, previous_summary, summary, trigger,
              model, input_chars, summary_chars, input_tokens, output_tokens, created_at, undone_at,
              dropped)
           SELECT $1::text, from_size, to_size, from_seq, to_seq, previous_summary, summary, trigger,
             model, input_chars, summary_chars, input_tokens, output_tokens, created_at, undone_at,
             dropped
           FROM compactions WHERE session_id = $2 AND to_seq <= $3 ORDER BY id`,
          [forkId, id, at],
        );
      await c.query(
        `UPDATE sessions SET
           message_count = (SELECT COUNT(*) FROM messages WHERE session_id = $1),
           transcript_hash = (SELECT transcript_hash FROM messages
             WHERE session_id = $1 AND transcript_hash IS NOT NULL ORDER BY seq DESC LIMIT 1)
         WHERE id = $1`,
        [forkId],
      );
      return { kind: 'forked', session: (await getSession(c, forkId))! };
    });
  }

  // ---- responses ------------------------------------------------------------

  async saveResponse(response: Omit<store.ResponseRow, 'created_at'>): Promise<void> {
    await this.rows(
      `INSERT INTO responses (id, session_id, end_seq, body, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (id) DO UPDATE SET end_seq = excluded.end_seq, body = excluded.body`,
      [response.id, response.session_id, response.end_seq, JSON.stringify(response.body), now()],
    );
  }

  async findResponse(id: string): Promise<store.ResponseRow | undefined> {
    const row = await this.row<records.ResponseRecord>('SELECT * FROM responses WHERE id = $1', [
      id,
    ]);
    return row && records.toResponseRow(row);
  }

  // ---- chat streams -----------------------------------------------------------
  // Liveness is the heartbeat's, on the database's clock, as for tasks.

  async openChatStream(sessionId: string, streamId: string, instanceId: string): Promise<void> {
    await this.tx(async (c) => {
      await c.query(
        `INSERT INTO chat_streams (session_id, stream_id, instance_id, ended, stop_requested, started_at)
         VALUES ($1, $2, $3, 0, 0, $4)
         ON CONFLICT (session_id) DO UPDATE SET stream_id = excluded.stream_id,
           instance_id = excluded.instance_id, ended = 0, stop_requested = 0,
           started_at = excluded.started_at`,
        [sessionId, streamId, instanceId, now()],
      );
      await c.query('DELETE FROM chat_stream_chunks WHERE session_id = $1 AND stream_id <> $2', [
        sessionId,
        streamId,
      ]);
    });
  }

  async writeChatStream(
    sessionId: string,
    streamId: string,
    batch: store.ChatStreamBatch | undefined,
    ended: boolean,
  ): Promise<{ stopRequested: boolean }> {
    // One statement: the batch, the end mark and the stop flag's read.
    const row = await this.row<{ stop_requested: number }>(
      `WITH batch AS (
         INSERT INTO chat_stream_chunks (session_id, stream_id, seq, chunks)
         SELECT $1, $2, $3::integer, $4::text
          WHERE $3::integer IS NOT NULL
            AND EXISTS (SELECT 1 FROM chat_streams WHERE session_id = $1 AND stream_id = $2)
       ), mark AS (
         UPDATE chat_streams SET ended = 1 WHERE $5::boolean AND session_id = $1 AND stream_id = $2
       )
       SELECT stop_requested FROM chat_streams WHERE session_id = $1 AND stream_id = $2`,
      [sessionId, streamId, batch?.seq ?? null, batch?.chunks ?? null, ended],
    );
    return { stopRequested: row?.stop_requested === 1 };
  }

  async findChatStream(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<store.ChatStreamState | undefined> {
    const row = await this.row<{
      stream_id: string;
      instance_id: string;
      ended: number;
      stop_requested: number;
      holder_live: boolean;
    }>(
      `SELECT stream_id, instance_id, ended, stop_requested,
         (instance_id = $2 OR EXISTS (SELECT 1 FROM instances i WHERE i.id = chat_streams.instance_id
            AND i.heartbeat_at >= now() - make_interval(secs => $3::double precision / 1000))) AS holder_live
       FROM chat_streams WHERE session_id = $1`,
      [sessionId, liveness.self, liveness.staleAfterMs],
    );
    return (
      row && {
        streamId: row.stream_id,
        instanceId: row.instance_id,
        ended: row.ended === 1,
        stopRequested: row.stop_requested === 1,
        holderLive: row.holder_live,
      }
    );
  }

  async readChatStream(
    sessionId: string,
    streamId: string,
    afterSeq: number,
  ): Promise<store.ChatStreamBatch[]> {
    return this.rows<store.ChatStreamBatch>(
      `SELECT seq, chunks FROM chat_stream_chunks
       WHERE session_id = $1 AND stream_id = $2 AND seq > $3 ORDER BY seq`,
      [sessionId, streamId, afterSeq],
    );
  }

  async requestChatStop(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<boolean> {
    const rows = await this.rows(
      `UPDATE chat_streams SET stop_requested = 1
       WHERE session_id = $1 AND ended = 0
         AND (instance_id = $2 OR EXISTS (SELECT 1 FROM instances i WHERE i.id = chat_streams.instance_id
           AND i.heartbeat_at >= now() - make_interval(secs => $3::double precision / 1000)))
       RETURNING session_id`,
      [sessionId, liveness.self, liveness.staleAfterMs],
    );
    return rows.length > 0;
  }

  // ---- front-end chats -------------------------------------------------------

  async findFrontEndChat(chat: store.FrontEndChat): Promise<string | undefined> {
    const key = records.frontEndChatKey(chat);
    const row = await this.row<{ session_id: string }>(
      `SELECT session_id FROM front_end_chats WHERE ${PG_FRONT_END_CHAT_MATCH}`,
      [key.protocol, key.key_id, key.end_user, key.agent_name, key.chat_id],
    );
    return row?.session_id;
  }

  async bindFrontEndChat(chat: store.FrontEndChat, sessionId: string): Promise<string> {
    const key = records.frontEndChatKey(chat);
    const params = [key.protocol, key.key_id, key.end_user, key.agent_name, key.chat_id];
    // Insert-or-read in two statements: under READ COMMITTED the read after a
    // conflict sees the row the other request committed. Should that row's
    // session be deleted in between, the insert is tried again.
    for (let attempt = 0; attempt < BIND_ATTEMPTS; attempt++) {
      const inserted = await this.row<{ session_id: string }>(
        `INSERT INTO front_end_chats
           (protocol, key_id, end_user, agent_name, chat_id, session_id, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
         ON CONFLICT DO NOTHING RETURNING session_id`,
        [...params, sessionId, now()],
      );
      if (inserted) return inserted.session_id;
      const bound = await this.findFrontEndChat(chat);
      if (bound !== undefined) return bound;
    }
    throw new Error(`Chat "${chat.chatId}" kept being unbound while binding it.`);
  }

  async rebindFrontEndChat(
    chat: store.FrontEndChat,
    fromSessionId: string,
    toSessionId: string,
  ): Promise<boolean> {
    const key = records.frontEndChatKey(chat);
    const rows = await this.rows<{ session_id: string }>(
      `UPDATE front_end_chats SET session_id = $7, updated_at = $8
       WHERE ${PG_FRONT_END_CHAT_MATCH} AND session_id = $6 RETURNING session_id`,
      [
        key.protocol,
        key.key_id,
        key.end_user,
        key.agent_name,
        key.chat_id,
        fromSessionId,
        toSessionId,
        now(),
      ],
    );
    return rows.length > 0;
  }

  // ---- messages -------------------------------------------------------------

  protected async writeMessages(append: PendingAppend): Promise<StoredMessage[]> {
    return (await this.append({ ...append, createdAt: now() })).messages;
  }

  protected async writeMessagesWithEvents(
    append: PendingAppend,
    eventType: string,
  ): Promise<store.AppendedWithEvents> {
    const { messages, events, session } = await this.append({
      ...append,
      createdAt: now(),
      eventType,
    });
    return { messages, events, session };
  }

  /**
   * One append. Where the session's head is known it is one statement,
   * committed on its own; a task's append, an unknown head, or a head that
   * moved meanwhile (another instance, a reset) take a transaction that
   * locks the row first. An append conditioned on a row version that finds
   * the row changed writes nothing and throws `SessionMovedError`.
   */
  private async append(write: AppendWrite): Promise<store.AppendedWithEvents> {
    const { sessionId, options } = write;
    if (write.messages.length === 0) return { messages: [], events: [] };
    const head = options.runningTask === undefined ? this.heads.get(sessionId) : undefined;
    let done: Appended | undefined;
    try {
      if (head !== undefined) {
        done = await this.statement((c) => appendAt(c, head, write));
        // Moved, or not as remembered: which of the two, the caller's read finds out.
        if (done === undefined && options.ifVersion !== undefined)
          throw new SessionMovedError(sessionId);
      }
      done ??= await this.tx(async (c) => {
        if (options.runningTask !== undefined)
          await this.assertStillRunning(c, options.runningTask);
        return this.appendLocked(c, write);
      });
    } catch (err) {
      // Whether it committed is unknown: the next append locks and reads.
      this.heads.forget(sessionId);
      throw err;
    }
    this.heads.set(sessionId, done.head);
    return done;
  }

  /**
   * Inside the append's transaction: the task is still this instance's
   * running task. The row is locked, so a peer's sweep marking it
   * `interrupted` commits either before (and this append fails) or after.
   */
  private async assertStillRunning(c: Queryable, taskId: string): Promise<void> {
    const { rows } = await c.query<store.TaskRow>('SELECT * FROM tasks WHERE id = $1 FOR UPDATE', [
      taskId,
    ]);
    requireRunningTask(taskId, rows[0], this.instanceId);
  }

  /** An append inside the caller's transaction, the session row locked first: its head cannot move. */
  private async appendLocked(c: Queryable, write: AppendWrite): Promise<Appended> {
    const head = await lockSession(c, write.sessionId);
    if (head === undefined) throw sessionNotFound(write.sessionId);
    const { ifVersion } = write.options;
    if (ifVersion !== undefined && head.version !== ifVersion)
      throw new SessionMovedError(write.sessionId);
    const done = await appendAt(c, head, write);
    if (done === undefined) throw new Error(`append: the locked session ${write.sessionId} moved`);
    return done;
  }

  protected async writeImportedMessages(
    sessionId: string,
    messages: readonly store.ImportedMessage[],
    tokens: readonly number[],
  ): Promise<void> {
    await this.tx(async (c) => {
      // The visible-transcript chain is rebuilt as the messages go in, so a
      // client resending the imported history lands in the imported session.
      const head = (await lockSession(c, sessionId))?.transcript_hash ?? null;
      const { rows, transcript } = decide.chainMessages(
        sessionId,
        messages,
        tokens,
        head,
        'import',
      );
      await insertMessageRows(c, rows);
      await c.query(
        `UPDATE sessions SET message_count = message_count + $2, last_seq = GREATEST(last_seq, $3),
           transcript_hash = $4 WHERE id = $1`,
        [sessionId, messages.length, messages[messages.length - 1]!.seq, transcript],
      );
    });
  }

  async listMessages(
    sessionId: string,
    options: { afterSeq: number; limit: number },
  ): Promise<StoredMessage[]> {
    const rows = await this.rows<records.MessageRecord>(
      `SELECT ${records.MESSAGE_COLUMNS} FROM messages WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
      [sessionId, options.afterSeq, options.limit],
    );
    return rows.map(records.toStoredMessage);
  }

  async loadContext(
    sessionId: string,
    afterSeq: number,
  ): Promise<{ system: StoredMessage[]; tail: StoredMessage[] }> {
    // One statement: the system messages and the tail, read from one snapshot.
    const rows = await this.rows<records.MessageRecord>(
      `SELECT ${records.CONTEXT_COLUMNS} FROM messages
       WHERE session_id = $1 AND (role = 'system' OR seq > $2) ORDER BY seq`,
      [sessionId, afterSeq],
    );
    const system: StoredMessage[] = [];
    const tail: StoredMessage[] = [];
    for (const row of rows)
      (row.role === 'system' ? system : tail).push(records.toStoredMessage(row));
    return { system, tail };
  }

  async listMessageMeta(sessionId: string, afterSeq: number): Promise<store.MessageMeta[]> {
    const rows = await this.rows<records.MessageMetaRecord>(
      `SELECT seq, role, chars, LENGTH(content) AS content_chars, tool_calls, tool_call_id
       FROM messages WHERE session_id = $1 AND seq > $2 AND role <> 'system' ORDER BY seq`,
      [sessionId, afterSeq],
    );
    return rows.map(records.toMessageMeta);
  }

  async listTail(sessionId: string, afterSeq: number, limit: number): Promise<StoredMessage[]> {
    const rows = await this.rows<records.MessageRecord>(
      `SELECT ${records.CONTEXT_COLUMNS} FROM messages
       WHERE session_id = $1 AND seq > $2 AND role <> 'system' ORDER BY seq LIMIT $3`,
      [sessionId, afterSeq, limit],
    );
    return rows.map(records.toStoredMessage);
  }

  async firstUserMessages(
    sessionIds: readonly string[],
    maxChars: number,
  ): Promise<Map<string, string>> {
    if (sessionIds.length === 0) return new Map();
    // One query: per id, the first user row by the (session_id, seq) index.
    const rows = await this.rows<{ id: string; content: string | null }>(
      `SELECT s.id, (SELECT left(m.content, $2) FROM messages m
                      WHERE m.session_id = s.id AND m.role = 'user' ORDER BY m.seq LIMIT 1) AS content
         FROM unnest($1::text[]) AS s(id)`,
      [[...sessionIds], maxChars],
    );
    return new Map(
      rows.flatMap((r) => (r.content === null ? [] : [[r.id, r.content] as [string, string]])),
    );
  }

  async searchHistory(
    sessionId: string,
    query: string,
    limit: number,
  ): Promise<store.HistoryHit[]> {
    const tsquery = toTsQuery(query);
    if (tsquery === undefined) return [];
    return this.rows<store.HistoryHit>(
      `SELECT m.seq, m.role, ts_headline('simple', m.content, q, '${HEADLINE}') AS snippet
       FROM messages m, to_tsquery('simple', $1) q
       WHERE m.session_id = $2 AND ${holds('m', 'q', this.wordsComplete)}
       ORDER BY ts_rank(${rowWords('m')}, q) DESC, m.seq LIMIT $3`,
      [tsquery, sessionId, limit],
    );
  }

  protected async recall({
    sessionId,
    words,
    maxSeq,
    limit,
  }: RecallSearch): Promise<RecallShortlist> {
    // Each word as the start its stem's words share ('deplo':* finds
    // "deploying" and "deployed" in the 'simple' tsvector, which keeps whole
    // words); the rows found are checked by stem below, so both dialects
    // return the same matches.
    // A number or an id is its own stem: matched whole, a number of four
    // digits or more also as the index holds "4,500" and "4.500".
    const terms = words.map((t) => {
      if (t.prefix) return `'${t.text}':*`;
      if (/^[a-z]+$/.test(t.text)) return `'${stemPrefix(t.text)}':*`;
      const groups = records.digitGroups(t.text);
      return groups
        ? `('${t.text}' | ${groups.map((g) => `'${g}'`).join(' <-> ')} | '${groups.join('.')}')`
        : lexeme(t.text);
    });
    // How many of the session's messages hold each word's stem, and how many
    // there are (migration 026): an indexed read of the query's stems, the
    // same whatever the session's length. The counts include the raw tail
    // (and lag the newest messages): shares, not exact figures, are used.
    await this.coverVocabulary(sessionId, maxSeq);
    const ranges = [{ lower: MESSAGES_STEM, upper: MESSAGES_STEM }, ...words.map(stemRange)];
    const counted = await this.rows<{ i: number; held: number }>(
      `SELECT r.i::int AS i,
              coalesce((SELECT sum(s.messages) FROM history_session_stems s
                        WHERE s.session_id = $1 AND s.stem >= r.lower AND s.stem <= r.upper), 0)::int AS held
       FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS r(lower, upper, i)`,
      [sessionId, ranges.map((r) => r.lower), ranges.map((r) => r.upper)],
    );
    const countOf = new Map(counted.map((c) => [c.i - 1, c.held]));
    const size = countOf.get(0) ?? 0;
    const held = terms.map((_, i) => countOf.get(i + 1) ?? 0);
    const evidence = evidenceWords(held, size);
    // A hit must hold an evidence word (below): with none among the words,
    // nothing can be recalled, and the candidates are not read.
    if (!evidence.includes(true)) return { rows: [], weights: [], evidence };
    // An evidence word few enough messages hold is read whole, through GIN;
    // a more common one only among the session's newest PG_RECALL_WINDOW
    // messages (the (session_id, seq) index backwards, bounded): a GIN read
    // of a common word would fetch and sort every row that holds it.
    const readWhole = Math.max(PG_RARE_MESSAGES, size * PG_RARE_SHARE);
    const rare = terms.filter((_, i) => evidence[i] && held[i]! < readWhole);
    const windowed = terms.filter((_, i) => evidence[i] && held[i]! >= readWhole);
    // ts_rank with length normalisation 1 (divide by 1 + log length), close
    // to bm25's; ts_rank knows no word's rarity, so the rare words' rank
    // counts PG_RARE_WEIGHT times (a rare word is the evidence). Each row is
    // read once with the columns the answer needs. With a windowed word, the
    // candidates are the window's rows that hold an evidence word and, below
    // it, the rows that hold a rare one; `seq + 0` keeps that test a filter:
    // as an index condition the planner ANDs the whole session's
    // (session_id, seq) range into the GIN lookup (700 pages at 100 000
    // messages). With rare words only, the window is not read at all.
    const score = `(ts_rank(c.search, q, 1)
                    + CASE WHEN $3 <> '' THEN ${PG_RARE_WEIGHT} * ts_rank(c.search, to_tsquery('simple', $3), 1) ELSE 0 END
                   )::float8 AS score`;
    const columns = `c.seq, c.role, left(c.content, ${RECALL_CONTENT_CHARS}) AS content, c.created_at`;
    // Planned with the call's values: which index is cheaper depends on the
    // session's length and the words' frequency in the whole table, and a
    // generic plan (a named statement's after five calls) knows neither; it
    // chose to AND the session's whole (session_id, seq) range into the GIN
    // lookup, 14 ms at 100 000 messages instead of 0.1.
    const hits =
      windowed.length === 0
        ? await this.rowsPlannedEach<store.RecallHit>(
            `SELECT ${columns}, ${score}
             FROM (SELECT seq, role, content, created_at, ${rowWords('m')} AS search FROM messages m
                   WHERE m.session_id = $1 AND m.seq <= $2 AND m.role <> 'system'
                     AND ${holds('m', "to_tsquery('simple', $3)", this.wordsComplete)}) c,
                  to_tsquery('simple', $4) q
             ORDER BY score DESC, c.seq LIMIT $5`,
            [sessionId, maxSeq, rare.join(' | '), terms.join(' | '), limit],
          )
        : await this.rowsPlannedEach<store.RecallHit>(
            `WITH w AS MATERIALIZED (SELECT seq, role, content, created_at, ${rowWords('m')} AS search
                                     FROM messages m
                                     WHERE session_id = $1 AND seq <= $2 AND role <> 'system'
                                     ORDER BY seq DESC LIMIT ${PG_RECALL_WINDOW})
             SELECT ${columns}, ${score}
             FROM (SELECT seq, role, content, created_at, search FROM w
                   WHERE search @@ to_tsquery('simple', $6)
                   UNION ALL
                   SELECT seq, role, content, created_at, ${rowWords('m')} AS search FROM messages m
                   WHERE $3 <> '' AND session_id = $1 AND seq <= $2 AND role <> 'system'
                     AND ${holds('m', "to_tsquery('simple', $3)", this.wordsComplete)}
                     AND seq + 0 < (SELECT min(seq) FROM w)) c, to_tsquery('simple', $4) q
             ORDER BY score DESC, c.seq LIMIT $5`,
            [
              sessionId,
              maxSeq,
              rare.join(' | '),
              terms.join(' | '),
              limit,
              [...rare, ...windowed].join(' | '),
            ],
          );
    const rows = hits
      .filter((hit) => {
        const found = records.wordsOf(hit.content);
        return words.some((t, i) => evidence[i] && found.some((w) => records.matchesTerm(t, w)));
      })
      .map(({ seq, role, content, created_at }) => ({
        seq,
        role,
        content,
        created_at,
        chars: content.length,
        held: 0,
      }));
    // The final order and score by BM25 with the session's frequencies, as
    // on SQLite: ts_rank's order picked the candidates, not their scores.
    return { rows, weights: held.map((df) => inverseFrequency(size, df)), evidence };
  }

  protected async recallContext(
    sessionId: string,
    seqs: readonly number[],
    maxSeq: number,
  ): Promise<RecallRead[]> {
    const rows = await this.rows<Omit<RecallRead, 'held' | 'chars'>>(
      `SELECT seq, role, coalesce(left(content, ${RECALL_CONTENT_CHARS}), '') AS content, created_at
       FROM messages
       WHERE session_id = $1 AND seq = ANY($2::int[]) AND seq <= $3 AND role <> 'system'
       ORDER BY seq`,
      [sessionId, [...seqs], maxSeq],
    );
    // `chars` as the shortlist's: the length read.
    return rows.map((row) => ({ ...row, chars: row.content.length, held: 0 }));
  }

  // ---- split search words (migration 027) -----------------------------------

  /**
   * Fills the split words of the messages that were there before migration
   * 027, in batches, off start-up, until it reaches the last of them; then
   * the searches read them alone.
   */
  private catchUpWords(): void {
    this.inBatches(() => this.backfillWordsBatch(), WORDS_BATCH);
  }

  /**
   * Runs `batch` off the caller, again while it reads a full `size`, until
   * the store closes; a batch that fails stops the run and leaves its mark.
   */
  private inBatches(batch: () => Promise<number>, size: number): void {
    const next = (): void => {
      if (this.closed) return;
      batch().then(
        (read) => {
          if (read === size) setImmediate(next);
        },
        () => undefined,
      );
    };
    setImmediate(next);
  }

  /**
   * Sets the split words of up to WORDS_BATCH messages above the backfill's
   * mark, in one transaction that moves the mark; returns how many it read.
   * A batch short of WORDS_BATCH reached the last message to fill: from then
   * on the searches use the words alone.
   */
  async backfillWordsBatch(): Promise<number> {
    const read = await this.tx(async (c) => {
      // The row lock queues instances filling at once: each batch starts at the mark it moves.
      const mark = (
        await c.query<{ last_message_id: string; until_id: string }>(
          'SELECT last_message_id, until_id FROM history_words_backfill WHERE id = 1 FOR UPDATE',
        )
      ).rows[0];
      if (mark === undefined || BigInt(mark.last_message_id) >= BigInt(mark.until_id)) return 0;
      const ids = (
        await c.query<{ id: string }>(
          'SELECT id FROM messages WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3',
          [mark.last_message_id, mark.until_id, WORDS_BATCH],
        )
      ).rows.map((r) => r.id);
      if (ids.length > 0) {
        await c.query(
          `UPDATE messages SET words = cairn_search_words(content)
           WHERE id = ANY($1::bigint[]) AND words IS NULL`,
          [ids],
        );
      }
      const last = ids.length === WORDS_BATCH ? ids.at(-1)! : mark.until_id;
      await c.query('UPDATE history_words_backfill SET last_message_id = $1 WHERE id = 1', [last]);
      return ids.length;
    });
    if (read < WORDS_BATCH) this.wordsComplete = true;
    return read;
  }

  // ---- vocabulary (typo correction) -----------------------------------------

  /**
   * Reads the messages above the vocabulary's mark in batches, off start-up,
   * until it has read them all (a large database after migration 023); a
   * batch that fails leaves the mark, and a recall that needs it reads it.
   */
  private catchUpVocabulary(): void {
    this.inBatches(() => this.indexVocabularyBatch(), VOCABULARY_BATCH);
  }

  async indexVocabularyBatch(): Promise<number> {
    return this.tx(async (c) => {
      // The row lock queues instances reading at once: each batch reads from the mark it moves.
      const mark = (
        await c.query<{ last_message_id: string }>(
          'SELECT last_message_id FROM history_vocabulary WHERE id = 1 FOR UPDATE',
        )
      ).rows[0]?.last_message_id;
      if (mark === undefined) return 0;
      const read = (
        await c.query<{ id: string } & CountedMessage>(
          'SELECT id, session_id, role, content FROM messages WHERE id > $1 ORDER BY id LIMIT $2',
          [mark, VOCABULARY_BATCH],
        )
      ).rows;
      if (read.length === 0) return 0;
      const stems = countSessionStems(read);
      await c.query(
        `INSERT INTO history_session_stems (session_id, stem, messages)
         SELECT u.* FROM unnest($1::text[], $2::text[], $3::int[]) AS u(session_id, stem, messages)
         WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = u.session_id)
         ON CONFLICT (session_id, stem)
         DO UPDATE SET messages = history_session_stems.messages + EXCLUDED.messages`,
        [stems.sessionIds, stems.stems, stems.messages],
      );
      const counts = countWords(read.flatMap((m) => (m.content === null ? [] : [m.content])));
      if (counts.size > 0) {
        const words = [...counts.keys()];
        const added = (
          await c.query<{ word: string; added: boolean }>(
            `INSERT INTO history_words (word, stem, messages)
             SELECT * FROM unnest($1::text[], $2::text[], $3::int[])
             ON CONFLICT (word) DO UPDATE SET messages = history_words.messages + EXCLUDED.messages
             RETURNING word, (xmax = 0) AS added`,
            [words, words.map(stemOf), words.map((w) => counts.get(w)!)],
          )
        ).rows.filter((r) => r.added);
        const keys = added.flatMap((r) => deletionKeys(r.word).map((key) => [key, r.word]));
        if (keys.length > 0) {
          await c.query(
            `INSERT INTO history_word_keys (key, word)
             SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`,
            [keys.map((k) => k[0]), keys.map((k) => k[1])],
          );
        }
      }
      await c.query('UPDATE history_vocabulary SET last_message_id = $1 WHERE id = 1', [
        read.at(-1)!.id,
      ]);
      return read.length;
    });
  }

  protected async vocabularyBehind(sessionId: string, maxSeq: number): Promise<boolean> {
    const row = await this.row<{ behind: boolean }>(
      `SELECT coalesce((SELECT id FROM messages WHERE session_id = $1 AND seq <= $2 ORDER BY seq DESC LIMIT 1), 0)
         > (SELECT last_message_id FROM history_vocabulary WHERE id = 1) AS behind`,
      [sessionId, maxSeq],
    );
    return row?.behind === true;
  }

  protected async heldStems(stems: readonly string[]): Promise<Map<string, number>> {
    const rows = await this.rows<{ stem: string; held: number }>(
      `SELECT w.stem, sum(w.messages)::int AS held FROM history_words w
       WHERE w.stem = ANY($1::text[]) GROUP BY w.stem`,
      [[...stems]],
    );
    return new Map(rows.map((r) => [r.stem, r.held]));
  }

  protected async wordCandidates(words: readonly string[]): Promise<Map<string, KnownWord[]>> {
    type Row = KnownWord & { query: string };
    // Trigrams: the words similar to each query word by the GIN index (the
    // extension's default threshold); else the deletion keys, as on SQLite.
    // Both are checked by edit distance after (vocabulary.ts).
    const rows =
      this.wordMatching === 'trigrams'
        ? await this.rows<Row>(
            `SELECT q.word AS query, c.word, c.stem, c.messages
             FROM unnest($1::text[]) AS q(word)
             CROSS JOIN LATERAL (SELECT w.word, w.stem, w.messages FROM history_words w
                                 WHERE w.word % q.word
                                 ORDER BY w.messages DESC, w.word LIMIT $2) c`,
            [[...words], MAX_CANDIDATES],
          )
        : await this.rows<Row>(
            `SELECT q.word AS query, c.word, c.stem, c.messages
             FROM unnest($1::text[], $2::text[]) AS q(word, keys)
             CROSS JOIN LATERAL (SELECT DISTINCT w.word, w.stem, w.messages
                                 FROM history_word_keys k JOIN history_words w ON w.word = k.word
                                 WHERE k.key = ANY(string_to_array(q.keys, ' '))
                                 ORDER BY w.messages DESC, w.word LIMIT $3) c`,
            [[...words], words.map((w) => queryKeys(w).join(' ')), MAX_CANDIDATES],
          );
    const out = new Map<string, KnownWord[]>(words.map((w) => [w, []]));
    for (const { query, ...word } of rows) out.get(query)?.push(word);
    return out;
  }

  // ---- compaction -----------------------------------------------------------

  async commitCompaction(input: store.NewCompaction): Promise<store.SessionRow | undefined> {
    return this.tx(async (c) => {
      if (input.runningTask !== undefined) await this.assertStillRunning(c, input.runningTask);
      const before = (
        await c.query<store.SessionRow>('SELECT * FROM sessions WHERE id = $1 FOR UPDATE', [
          input.sessionId,
        ])
      ).rows[0];
      if (!decide.compactionApplies(before, input)) return undefined;
      const record = decide.compactionRecord(
        { ...input, summary: pgText(input.summary) },
        before,
        now(),
      );
      const updated = await c.query<store.SessionRow>(
        `UPDATE sessions SET
           compact_summary = $2, compact_size = $3, compact_seq = $4,
           compaction_count = compaction_count + 1,
           compaction_input_tokens = compaction_input_tokens + $5,
           compaction_output_tokens = compaction_output_tokens + $6,
           compaction_suspended = CASE WHEN $7 = 'manual' THEN 0 ELSE compaction_suspended END,
           last_prompt_tokens = NULL, last_prompt_seq = NULL, updated_at = $8
         WHERE id = $1 RETURNING *`,
        [
          input.sessionId,
          record.summary,
          record.to_size,
          record.to_seq,
          record.input_tokens,
          record.output_tokens,
          record.trigger,
          record.created_at,
        ],
      );
      await insertCompaction(c, record);
      // Compaction spends the session owner's tokens like any model call.
      const spent = record.input_tokens + record.output_tokens;
      await chargeSessionTokens(c, input.sessionId, spent);
      return updated.rows[0];
    });
  }

  async undoCompaction(
    sessionId: string,
  ): Promise<{ session: store.SessionRow; restoredSize: number } | undefined> {
    return this.tx(async (c) => {
      if ((await lockSession(c, sessionId)) === undefined) return undefined;
      const latest = (
        await c.query<decide.StoredCompactionRow>(
          'SELECT * FROM compactions WHERE session_id = $1 ORDER BY id DESC LIMIT 1',
          [sessionId],
        )
      ).rows[0];
      if (!decide.undoApplies(latest)) return undefined;
      const updatedAt = now();
      const restored = await c.query<store.SessionRow>(
        `UPDATE sessions SET
           compact_summary = $2, compact_size = $3, compact_seq = $4,
           compaction_count = GREATEST(compaction_count - 1, 0),
           last_prompt_tokens = NULL, last_prompt_seq = NULL, updated_at = $5
         WHERE id = $1 AND compact_size = $6 AND compact_seq = $7 RETURNING *`,
        [
          sessionId,
          latest.previous_summary,
          latest.from_size,
          latest.from_seq,
          updatedAt,
          latest.to_size,
          latest.to_seq,
        ],
      );
      const session = restored.rows[0];
      if (session === undefined) return undefined;
      await c.query('UPDATE compactions SET undone_at = $1 WHERE id = $2', [updatedAt, latest.id]);
      return { session, restoredSize: latest.from_size };
    });
  }

  async listCompactions(sessionId: string): Promise<store.CompactionRow[]> {
    const rows = await this.rows<decide.StoredCompactionRow>(
      'SELECT * FROM compactions WHERE session_id = $1 ORDER BY id',
      [sessionId],
    );
    return rows.map(decide.compactionFromRow);
  }

  // ---- prepared compactions ------------------------------------------------
  // Liveness is the heartbeat's, on the database's clock, as for tasks.

  async claimPreparation(claim: store.PreparationClaim): Promise<boolean> {
    return this.tx(async (c) => {
      const result = await c.query(
        `INSERT INTO prepared_compactions
           (session_id, holder, expected_size, expected_epoch, claimed_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,
           expected_size = excluded.expected_size, expected_epoch = excluded.expected_epoch,
           claimed_at = excluded.claimed_at, ${decide.PREPARED_COLUMNS.map((col) => `${col} = NULL`).join(', ')}
         WHERE prepared_compactions.expected_size <> excluded.expected_size
            OR prepared_compactions.expected_epoch <> excluded.expected_epoch
            OR (prepared_compactions.summary IS NULL AND prepared_compactions.holder <> excluded.holder
                AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = prepared_compactions.holder
                  AND i.heartbeat_at >= now() - make_interval(secs => $6::double precision / 1000)))`,
        [
          claim.sessionId,
          claim.holder,
          claim.expectedSize,
          claim.expectedEpoch,
          now(),
          claim.staleAfterMs,
        ],
      );
      return (result.rowCount ?? 0) > 0;
    });
  }

  async finishPreparation(prepared: store.PreparedSummary): Promise<boolean> {
    const sets = decide.PREPARED_COLUMNS.map((col, i) => `${col} = $${i + 5}`).join(', ');
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE prepared_compactions SET ${sets}
         WHERE session_id = $1 AND holder = $2 AND expected_size = $3 AND expected_epoch = $4
           AND summary IS NULL`,
        [
          prepared.sessionId,
          prepared.holder,
          prepared.expectedSize,
          prepared.expectedEpoch,
          ...decide.preparedValues(prepared, now()),
        ],
      );
      return (result.rowCount ?? 0) > 0;
    });
  }

  async findPreparation(sessionId: string): Promise<store.PreparedCompactionRow | undefined> {
    const [row] = await this.rows<decide.StoredPreparationRow>(
      'SELECT * FROM prepared_compactions WHERE session_id = $1',
      [sessionId],
    );
    return row === undefined ? undefined : decide.preparationFromRow(row);
  }

  async dropPreparation(sessionId: string, holder?: string): Promise<void> {
    await this.tx((c) =>
      c.query(
        'DELETE FROM prepared_compactions WHERE session_id = $1 AND ($2::text IS NULL OR holder = $2)',
        [sessionId, holder ?? null],
      ),
    );
  }

  async setCompactionSuspended(sessionId: string, suspended: boolean): Promise<void> {
    await this.tx((c) =>
      c.query('UPDATE sessions SET compaction_suspended = $1 WHERE id = $2', [
        suspended ? 1 : 0,
        sessionId,
      ]),
    );
  }

  async appendImportedCompactions(
    sessionId: string,
    compactions: readonly store.ImportedCompaction[],
  ): Promise<void> {
    await this.tx(async (c) => {
      for (const k of compactions) {
        const texts = { previous_summary: pgText(k.previous_summary), summary: pgText(k.summary) };
        const dropped = pgText(decide.droppedText(k.dropped));
        await insertCompaction(c, { ...k, ...texts, dropped, session_id: sessionId });
      }
    });
  }

  // ---- events ---------------------------------------------------------------

  async appendEvent(event: store.NewEvent): Promise<store.EventRow> {
    return (await this.statement((c) => insertEvents(c, [event], now())))[0]!;
  }

  async listEvents(options: store.EventFilter): Promise<store.EventRow[]> {
    const { afterId, sessionId, ownerKey, limit } = options;
    const where = ['id > $1'];
    const params: unknown[] = [afterId, limit];
    if (sessionId !== undefined) {
      params.push(sessionId);
      where.push(`session_id = $${params.length}`);
    }
    if (ownerKey !== undefined) {
      params.push(ownerKey);
      where.push(`session_id IN (SELECT id FROM sessions WHERE owner_key = $${params.length})`);
    }
    const rows = await this.rows<records.EventRecord>(
      `SELECT * FROM events WHERE ${where.join(' AND ')} ORDER BY id LIMIT $2`,
      params,
    );
    return rows.map(records.toEventRow);
  }

  // ---- tasks ----------------------------------------------------------------

  async createTask(input: store.NewTask): Promise<store.TaskRow> {
    const id = newId('task');
    return this.tx(async (c) => {
      // A task belongs to whoever owns its session.
      const created = await c.query<store.TaskRow>(
        `INSERT INTO tasks (id, session_id, agent_name, status, input, owner_instance, created_at,
           updated_at, owner_key, end_user)
         SELECT $1, $2, $3, 'running', $4, $6, $5, $5, owner_key, end_user FROM sessions WHERE id = $2
         RETURNING *`,
        [id, input.sessionId, input.agentName, pgText(input.input), now(), this.instanceId],
      );
      const task = created.rows[0];
      if (task === undefined) throw sessionNotFound(input.sessionId);
      return task;
    });
  }

  async findTask(id: string): Promise<store.TaskRow | undefined> {
    return this.row<store.TaskRow>('SELECT * FROM tasks WHERE id = $1', [id]);
  }

  async listTasks(filter: store.TaskFilter): Promise<store.Page<store.TaskRow>> {
    return this.newestFirst<store.TaskRow>('tasks', decide.taskFilterColumns(filter), filter);
  }

  async transitionTask(
    id: string,
    from: readonly store.TaskStatus[],
    patch: store.TaskPatch,
  ): Promise<store.TaskRow | undefined> {
    const params: unknown[] = [id, now(), [...from]];
    const assignments = decide.taskPatchColumns(patch).map((column) => {
      const value = (patch as Record<string, unknown>)[column] ?? null;
      params.push(typeof value === 'string' ? pgText(value) : value);
      return `${column} = $${params.length}`;
    });
    assignments.push('updated_at = $2');
    // A task set running is this instance's to run (and to be interrupted with it).
    if (patch.status === 'running') {
      params.push(this.instanceId);
      assignments.push(`owner_instance = $${params.length}`);
    }
    params.push(this.instanceId);
    const self = params.length;
    // A concurrent transition re-checks the status after the first one commits: one wins.
    return this.tx(async (c) => {
      const result = await c.query<store.TaskRow>(
        `UPDATE tasks SET ${assignments.join(', ')} WHERE id = $1 AND status = ANY($3::text[])
           AND (status <> 'running' OR owner_instance IS NULL OR owner_instance = $${self})
         RETURNING *`,
        params,
      );
      return result.rows[0];
    });
  }

  async findWaitingTaskForSession(sessionId: string): Promise<store.TaskRow | undefined> {
    return this.row<store.TaskRow>(
      "SELECT * FROM tasks WHERE session_id = $1 AND status = 'waiting' ORDER BY created_at DESC LIMIT 1",
      [sessionId],
    );
  }

  async findSessionWithWaitingTask(
    sessionId: string,
  ): Promise<{ session: store.SessionRow | undefined; waitingTask: store.TaskRow | undefined }> {
    // One statement, each row as one JSON value, which reads back as the row
    // does: the task's columns are all text, and the session's numbers are
    // JSON numbers as its BIGINTs are (open-pool.ts). Two fields, not thirty:
    // the driver's per-field work was most of this read's cost in the process.
    const found = await this.row<{
      session: store.SessionRow;
      waiting_task: store.TaskRow | null;
    }>(
      `SELECT row_to_json(s) AS session, (SELECT row_to_json(t) FROM tasks t
         WHERE t.session_id = s.id AND t.status = 'waiting' ORDER BY t.created_at DESC LIMIT 1
       ) AS waiting_task
       FROM sessions s WHERE s.id = $1`,
      [sessionId],
    );
    if (found === undefined) return { session: undefined, waitingTask: undefined };
    return {
      session: this.heads.note(found.session),
      waitingTask: found.waiting_task ?? undefined,
    };
  }

  async interruptRunningTasks(ownerInstance?: string): Promise<number> {
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE tasks SET status = 'interrupted', error = $1, updated_at = $2
         WHERE status = 'running' AND ($3::text IS NULL OR owner_instance = $3)`,
        [records.INTERRUPTED_ERROR, now(), ownerInstance ?? null],
      );
      return result.rowCount ?? 0;
    });
  }

  // ---- instances ------------------------------------------------------------
  // Heartbeats use the database's clock, so instances on machines whose
  // clocks disagree still agree on who is stale.

  async heartbeatInstance(instanceId: string): Promise<void> {
    await this.rows(
      `INSERT INTO instances (id, started_at, heartbeat_at) VALUES ($1, now(), now())
       ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`,
      [instanceId],
    );
  }

  async removeInstance(instanceId: string): Promise<void> {
    await this.rows('DELETE FROM instances WHERE id = $1', [instanceId]);
  }

  async releaseOrphanedDaemonLeases(options: store.OrphanScope): Promise<number> {
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE daemon_runs SET lease_owner = NULL, lease_expires = NULL
         WHERE lease_owner IS NOT NULL AND lease_owner IS DISTINCT FROM $1
           AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = daemon_runs.lease_owner
                           AND i.heartbeat_at >= now() - make_interval(secs => $2::double precision / 1000))`,
        [options.self, options.staleAfterMs],
      );
      return result.rowCount ?? 0;
    });
  }

  async closeOrphanedDaemonSessions(options: store.OrphanScope): Promise<number> {
    const isLive = (owner: string) =>
      `EXISTS (SELECT 1 FROM instances i WHERE i.id = ${owner}
               AND i.heartbeat_at >= now() - make_interval(secs => $3::double precision / 1000))`;
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE sessions s SET status = 'closed', updated_at = $1
         WHERE s.mode = 'daemon' AND s.status = 'active' AND (
           EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = s.id AND t.status = 'running'
                   AND t.owner_instance IS DISTINCT FROM $2 AND NOT ${isLive('t.owner_instance')})
           OR EXISTS (SELECT 1 FROM daemon_runs d WHERE d.agent_name = s.agent_name
                      AND d.lease_owner IS NOT NULL AND d.lease_owner IS DISTINCT FROM $2
                      AND NOT ${isLive('d.lease_owner')}))`,
        [now(), options.self, options.staleAfterMs],
      );
      return result.rowCount ?? 0;
    });
  }

  async interruptOrphanedTasks(options: store.OrphanScope): Promise<number> {
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE tasks SET status = 'interrupted', error = $1, updated_at = $2
         WHERE status = 'running' AND owner_instance IS DISTINCT FROM $3
           AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = tasks.owner_instance
                           AND i.heartbeat_at >= now() - make_interval(secs => $4::double precision / 1000))`,
        [records.INSTANCE_LOST_ERROR, now(), options.self, options.staleAfterMs],
      );
      return result.rowCount ?? 0;
    });
  }

  // ---- daemons --------------------------------------------------------------

  async findDaemonState(agentName: string): Promise<store.DaemonState | undefined> {
    return this.row<store.DaemonState>('SELECT * FROM daemon_runs WHERE agent_name = $1', [
      agentName,
    ]);
  }

  async claimDaemonLease(
    agentName: string,
    owner: string,
    at: Date,
    leaseMs: number,
    onlyIfDue = false,
  ): Promise<boolean> {
    return this.tx(async (c) => {
      await ensureDaemon(c, agentName);
      // A concurrent claim re-evaluates the WHERE on the committed row: one owner wins.
      const result = await c.query(
        `UPDATE daemon_runs SET lease_owner = $2, lease_expires = $3
         WHERE agent_name = $1 AND (lease_owner IS NULL OR lease_expires < $4 OR lease_owner = $2)
           AND (NOT $5 OR next_run_at IS NULL OR next_run_at <= $4)`,
        [
          agentName,
          owner,
          new Date(at.getTime() + leaseMs).toISOString(),
          at.toISOString(),
          onlyIfDue,
        ],
      );
      return (result.rowCount ?? 0) > 0;
    });
  }

  protected finishRun(run: FinishedRun): Promise<boolean> {
    return this.tx(async (c) => {
      const result = await c.query(
        `UPDATE daemon_runs SET last_run_at = $3, next_run_at = $4, lease_owner = NULL, lease_expires = NULL
         WHERE agent_name = $1 AND lease_owner = $2`,
        [run.agentName, run.owner, run.lastRunAt, run.nextRunAt],
      );
      return (result.rowCount ?? 0) > 0;
    });
  }

  async releaseDaemonLeases(): Promise<number> {
    return this.tx(async (c) => {
      const result = await c.query(
        'UPDATE daemon_runs SET lease_owner = NULL, lease_expires = NULL WHERE lease_owner IS NOT NULL',
      );
      return result.rowCount ?? 0;
    });
  }

  async setDaemonNextRun(agentName: string, nextRunAt: Date | null): Promise<void> {
    await this.tx(async (c) => {
      await ensureDaemon(c, agentName);
      await c.query('UPDATE daemon_runs SET next_run_at = $1 WHERE agent_name = $2', [
        nextRunAt?.toISOString() ?? null,
        agentName,
      ]);
    });
  }

  // ---- memory ---------------------------------------------------------------

  async listMemory(
    agentName: string,
    query?: string,
    limit = records.MEMORY_PAGE,
  ): Promise<store.MemoryNote[]> {
    if (query !== undefined && query.trim() !== '') {
      const tsquery = toTsQuery(query);
      if (tsquery === undefined) return [];
      return this.rows<store.MemoryNote>(
        `SELECT ${MEMORY_COLUMNS} FROM memory m, to_tsquery('simple', $1) q
         WHERE m.agent_name = $2 AND m.search @@ q
         ORDER BY ts_rank(m.search, q) DESC, m.updated_at DESC, m.id DESC LIMIT $3`,
        [tsquery, agentName, limit],
      );
    }
    return this.rows<store.MemoryNote>(
      `SELECT ${MEMORY_COLUMNS} FROM memory WHERE agent_name = $1
       ORDER BY updated_at DESC, id DESC LIMIT $2`,
      [agentName, limit],
    );
  }

  async putMemory(
    agentName: string,
    key: string,
    content: string,
    options: store.MemoryWriteOptions = {},
  ): Promise<store.MemoryNote> {
    return this.tx(async (c) => {
      if (options.runningTask !== undefined) await this.assertStillRunning(c, options.runningTask);
      const result = await c.query<store.MemoryNote>(
        `INSERT INTO memory (agent_name, key, content, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $4)
         ON CONFLICT (agent_name, key) DO UPDATE SET content = EXCLUDED.content, updated_at = EXCLUDED.updated_at
         RETURNING ${MEMORY_COLUMNS}`,
        [agentName, pgText(key), pgText(content), now()],
      );
      return result.rows[0]!;
    });
  }

  async deleteMemory(
    agentName: string,
    key: string,
    options: store.MemoryWriteOptions = {},
  ): Promise<boolean> {
    return this.tx(async (c) => {
      if (options.runningTask !== undefined) await this.assertStillRunning(c, options.runningTask);
      const result = await c.query('DELETE FROM memory WHERE agent_name = $1 AND key = $2', [
        agentName,
        key,
      ]);
      return (result.rowCount ?? 0) > 0;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }

  /** A keyset page of `table`, newest first (`newestFirstQuery`). */
  private async newestFirst<T extends { created_at: string; id: string }>(
    table: 'sessions' | 'tasks',
    equals: Record<string, string | undefined>,
    page: { limit: number; cursor?: string },
  ): Promise<store.Page<T>> {
    const query = decide.newestFirstQuery(`SELECT * FROM ${table}`, equals, page, (n) => `$${n}`);
    return decide.newestFirstPage(await this.rows<T>(query.sql, query.params), page.limit);
  }
}

async function insertCompaction(c: Queryable, record: decide.CompactionRecord): Promise<void> {
  const columns = decide.COMPACTION_COLUMNS;
  await c.query(
    `INSERT INTO compactions (${columns.join(', ')})
     VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')})`,
    columns.map((column) => record[column]),
  );
}

async function getSession(c: Queryable, id: string): Promise<store.SessionRow | undefined> {
  return (await c.query<store.SessionRow>('SELECT * FROM sessions WHERE id = $1', [id])).rows[0];
}

/** Locks the session row for the rest of the transaction; undefined when there is none. */
async function lockSession(c: Queryable, id: string): Promise<LockedHead | undefined> {
  const result = await c.query<LockedHead>(
    'SELECT last_seq, transcript_hash, xmin::text AS version FROM sessions WHERE id = $1 FOR UPDATE',
    [id],
  );
  return result.rows[0];
}

/** A locked session's head, with the row's version. */
interface LockedHead extends SessionHead {
  version: string;
}

async function ensureDaemon(c: Queryable, agentName: string): Promise<void> {
  await c.query(
    'INSERT INTO daemon_runs (agent_name) VALUES ($1) ON CONFLICT (agent_name) DO NOTHING',
    [agentName],
  );
}
