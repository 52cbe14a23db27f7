/**
 * The SQLite implementation of `Store` (better-sqlite3). Every write is one
 * `BEGIN IMMEDIATE` transaction with no `await` inside, so it is committed
 * before the returned promise resolves and two connections never hit
 * SQLITE_BUSY_SNAPSHOT. Statements are prepared once, typed with their
 * parameters and rows. What both dialects decide the same way (the compaction
 * precondition, the transcript chain, keyset pages) lives in ../decisions.ts;
 * this file holds the SQL and the way SQLite runs it.
 */
import type { ChatMessage, StoredMessage } from '../../llm/messages.js';
import { estimateMessageTokens } from '../../llm/tokens.js';
import type {
  AppendOptions,
  CompactionRow,
  DaemonState,
  EventFilter,
  EventRow,
  ForkOutcome,
  HistoryHit,
  ImportedCompaction,
  ImportedMessage,
  ImportedSession,
  MemoryNote,
  MemoryWriteOptions,
  MessageMeta,
  NewCompaction,
  NewEvent,
  NewSession,
  NewTask,
  OrphanScope,
  Owner,
  Page,
  PreparationClaim,
  PreparedCompactionRow,
  PreparedSummary,
  RecallHit,
  ResponseRow,
  SessionEdit,
  SessionFilter,
  SessionRow,
  Store,
  TaskFilter,
  TaskPatch,
  TaskRow,
  TaskStatus,
  ChatStreamBatch,
  ChatStreamState,
  FrontEndChat,
} from '../store.js';
import { ADMIN_OWNER, evidenceWords, RECALL_CONTENT_CHARS } from '../store.js';
import { SqliteCallRecords } from './sqlite-call-records.js';
import { SqliteVectors } from './sqlite-vectors.js';
import {
  StoreBase,
  type FinishedRun,
  type PendingAppend,
  type RecallRead,
  type RecallSearch,
  type RecallShortlist,
} from '../store-base.js';
import { sessionNotFound } from '../session-not-found.js';
import {
  chargeKeyTokens,
  chargeSessionTokens,
  prepareKeyStatements,
  SqliteKeys,
  type KeyStatements,
} from './sqlite-keys.js';
import {
  openDatabase,
  SQLITE_BUSY_TIMEOUT_MS,
  SQLITE_SYNC_BUSY_TIMEOUT_MS,
  type SqliteDatabase,
} from './open-database.js';
import { requireRunningTask } from '../task-taken-over.js';
import { BackgroundCheckpoints } from './background-checkpoints.js';
import { COMMON_SHARE, RecallPlanner } from './recall-plan.js';
import { stemOf } from '../stem.js';
import {
  countWords,
  deletionKeys,
  MAX_CANDIDATES,
  queryKeys,
  VOCABULARY_BATCH,
  type KnownWord,
} from '../vocabulary.js';
import {
  estimateFrequency,
  ftsTerm,
  MAX_RANKED_TERMS,
  shortlist,
  SHORTLIST_PER_HIT,
  TERM_ROWS_CAP,
} from '../recall-rank.js';
import { GroupCommit, retryWhileBusy } from './group-commit.js';
import * as decide from '../decisions.js';
import { secondResultError } from '../second-result.js';
import {
  CONTEXT_COLUMNS,
  frontEndChatKey,
  INSTANCE_LOST_ERROR,
  INTERRUPTED_ERROR,
  MEMORY_PAGE,
  MESSAGE_COLUMNS,
  newId,
  now,
  searchWords,
  toEventRow,
  toMessageMeta,
  toResponseRow,
  toStoredMessage,
  type EventRecord,
  type MessageMetaRecord,
  type MessageRecord,
  type ResponseRecord,
} from '../records.js';

/**
 * Messages wait this long after an append before the queued ones are added
 * to the history index in one batch (migration 008), so a turn never pays
 * for the index; a search indexes whatever is still queued first.
 */
export const HISTORY_INDEX_DELAY_MS = 1_000;
/** Rows one indexing transaction takes at most, so a batch never holds the lock for long. */
export const HISTORY_INDEX_BATCH = 2_000;

/**
 * Turns free text into an FTS5 query that cannot be a syntax error: each word
 * becomes a quoted phrase and the words are OR-ed, ranked by bm25.
 */
export function toFtsQuery(text: string): string | undefined {
  const words = searchWords(text);
  return words.length === 0 ? undefined : words.map((w) => `"${w}"`).join(' OR ');
}

/**
 * A MATCH limited to one session: FTS5 intersects the session id's posting
 * list with the words', so the search never touches another session's rows
 * (the index holds each message's session id, migration 014). `words` is an
 * FTS5 expression of quoted terms.
 *
 * The id is matched by its own part, not as the phrase "sess <id>": every
 * indexed row holds the token "sess", and bm25 counts each phrase of the
 * query across the whole index, so the phrase made every search read a
 * posting list as long as the database. The id's part alone is a posting
 * list as long as the session. (An id that is not `sess_` and one token,
 * such as an imported one, is matched whole; the SQL around the MATCH checks
 * the session either way.)
 */
export function sessionMatch(sessionId: string, words: string): string {
  const own = /^sess_([A-Za-z0-9]+)$/.exec(sessionId)?.[1] ?? sessionId;
  return `session_id : "${own.replaceAll('"', '""')}" AND content : (${words})`;
}

/** A sweep's statement parameters: who is not an orphan, and since when a heartbeat counts as live. */
function orphanParams(scope: OrphanScope): { now: string; self: string; live_since: string } {
  const liveSince = new Date(Date.now() - scope.staleAfterMs).toISOString();
  return { now: now(), self: scope.self, live_since: liveSince };
}

/** A recall candidate as read: the hit, its id and its whole length. */
type RecallRow = RecallHit & { id: number; chars: number };

/** A recall row as the ranking reads it: without its id, with the words the index found in it. */
function recallRead(
  { seq, role, content, created_at, chars }: RecallRow,
  held: number,
): RecallRead {
  return { seq, role, content, created_at, chars, held };
}

/** The parameters of `sessionByTranscript`. */
interface TranscriptLookup {
  agent: string;
  hash: string;
  owner_key: string | null;
  end_user: string | null;
}

/** The parameters of `ownerEventsAfter`. */
interface OwnerEvents {
  after: number;
  owner_key: string;
  limit: number;
}

/** Every statement the store runs, prepared once per connection. */
function prepareStatements(db: SqliteDatabase) {
  return {
    insertSession: db.prepare(`INSERT INTO sessions
      (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at, compact_count,
       owner_key, end_user, transcript_hash)
      VALUES (@id, @agent_name, @mode, 'active', @title, @parent_session_id, @created_at, @created_at, @compact_count,
       @owner_key, @end_user, @transcript_hash)`),
    getSession: db.prepare<[string], SessionRow>('SELECT * FROM sessions WHERE id = ?'),
    appendState: db.prepare<[string], { last_seq: number; transcript_hash: string | null }>(
      'SELECT last_seq, transcript_hash FROM sessions WHERE id = ?',
    ),
    insertMessage: db.prepare<decide.MessageInsert>(
      `INSERT INTO messages (${MESSAGE_COLUMNS}, chars, tokens, transcript_hash, answers_seq)
      VALUES (@session_id, @seq, @role, @content, @tool_calls, @tool_call_id, @name, @created_at, @chars, @tokens, @transcript_hash,
        ${NEWEST_ASSISTANT_OR_GIVEN})`,
    ),
    updateSession: db.prepare(`UPDATE sessions SET
        title = CASE WHEN @set_title THEN @title ELSE title END,
        compact_count = COALESCE(@compact_count, compact_count),
        updated_at = @updated_at
      WHERE id = @id`),
    insertImportedSession: db.prepare(`INSERT INTO sessions
      (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at,
       input_tokens, output_tokens, compact_summary, compact_size, compact_count, compaction_count,
       compact_seq, last_prompt_tokens, last_prompt_seq, compaction_suspended,
       compaction_input_tokens, compaction_output_tokens, cost, cache_read_tokens, cache_write_tokens,
       owner_key, end_user)
      VALUES (@id, @agent_name, @mode, @status, @title, NULL, @created_at, @updated_at,
       @input_tokens, @output_tokens, @compact_summary, @compact_size, @compact_count,
       @compaction_count, @compact_seq, @last_prompt_tokens, @last_prompt_seq,
       @compaction_suspended, @compaction_input_tokens, @compaction_output_tokens, @cost,
       @cache_read_tokens, @cache_write_tokens, @owner_key, @end_user)`),
    bumpImported: db.prepare(`UPDATE sessions SET
        message_count = message_count + @count, last_seq = MAX(last_seq, @last_seq),
        transcript_hash = @transcript_hash
      WHERE id = @id`),
    // Returns the owner key the append's tokens are charged to (null: the admin's).
    bumpSession: db.prepare<
      Record<string, unknown>,
      { owner_key: string | null }
    >(`UPDATE sessions SET
        message_count = message_count + @count,
        last_seq = @last_seq,
        transcript_hash = @transcript_hash,
        input_tokens = input_tokens + @input_tokens,
        output_tokens = output_tokens + @output_tokens,
        cache_read_tokens = cache_read_tokens + @cache_read_tokens,
        cache_write_tokens = cache_write_tokens + @cache_write_tokens,
        last_prompt_tokens = COALESCE(@prompt_tokens, last_prompt_tokens),
        last_prompt_seq = CASE WHEN @prompt_tokens IS NULL THEN last_prompt_seq ELSE @prompt_seq END,
        updated_at = @updated_at
      WHERE id = @id RETURNING owner_key`),
    pageMessages: db.prepare<[string, number, number], MessageRecord>(
      `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`,
    ),
    systemMessages: db.prepare<[string], MessageRecord>(
      `SELECT ${CONTEXT_COLUMNS} FROM messages WHERE session_id = ? AND role = 'system' ORDER BY seq`,
    ),
    tailMessages: db.prepare<
      [string, number],
      MessageRecord
    >(`SELECT ${CONTEXT_COLUMNS} FROM messages
      WHERE session_id = ? AND seq > ? AND role <> 'system' ORDER BY seq`),
    firstUserMessage: db.prepare<[{ id: string; max: number }], { content: string | null }>(
      `SELECT substr(content, 1, @max) AS content FROM messages
       WHERE session_id = @id AND role = 'user' ORDER BY seq LIMIT 1`,
    ),
    tailPage: db.prepare<
      [string, number, number],
      MessageRecord
    >(`SELECT ${CONTEXT_COLUMNS} FROM messages
      WHERE session_id = ? AND seq > ? AND role <> 'system' ORDER BY seq LIMIT ?`),
    // Rows from before the chars column existed have NULL there: fall back
    // to the content length (their tool calls are then measured in JS).
    messageMeta: db.prepare<[string, number], MessageMetaRecord>(
      `SELECT seq, role, chars, LENGTH(content) AS content_chars, tool_calls, tool_call_id
      FROM messages WHERE session_id = ? AND seq > ? AND role <> 'system' ORDER BY seq`,
    ),
    // One batch of the history-index queue (migration 008): the same ids, in one transaction.
    indexQueued: db.prepare(`INSERT INTO messages_fts (rowid, content, session_id)
      SELECT id, content, session_id FROM messages
      WHERE id IN (SELECT id FROM messages_fts_pending ORDER BY id LIMIT ?)`),
    anyQueued: db.prepare<[], number>('SELECT 1 FROM messages_fts_pending LIMIT 1').pluck(),
    unqueueIndexed: db.prepare(
      'DELETE FROM messages_fts_pending WHERE id IN (SELECT id FROM messages_fts_pending ORDER BY id LIMIT ?)',
    ),
    // A word's matches in the whole history index, counted up to the limit (recall-plan.ts).
    countMatches: db
      .prepare<[string, number], number>(
        'SELECT count(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? LIMIT ?)',
      )
      .pluck(),
    // Whether the queue holds a message of this session at or below the seq:
    // the queue is short (a batch a moment after appends), so it is the outer loop.
    queuedUpTo: db.prepare<[string, number], { found: number }>(`SELECT 1 AS found
      FROM messages_fts_pending p CROSS JOIN messages m ON m.id = p.id
      WHERE m.session_id = ? AND m.seq <= ? LIMIT 1`),
    // CROSS JOIN keeps the index as the outer loop: one session-scoped MATCH
    // (migration 014), then each hit's row by id. Left to itself the planner
    // walks the session's rows and runs the MATCH once per row by rowid, which
    // costs seconds per search on a database of some 20 000 messages.
    searchHistory: db.prepare<
      [string, string, number],
      HistoryHit
    >(`SELECT m.seq AS seq, m.role AS role,
        snippet(messages_fts, 0, '[', ']', '…', 16) AS snippet
      FROM messages_fts CROSS JOIN messages m ON m.id = messages_fts.rowid
      WHERE messages_fts MATCH ? AND m.session_id = ?
      ORDER BY rank LIMIT ?`),
    // Recall (recall-rank.ts). The id of the session's last message at or
    // below the pointer: ids grow with seq, so no searchable row is above it.
    recallBound: db
      .prepare<[string, number], number>(
        'SELECT id FROM messages WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1',
      )
      .pluck(),
    // The session's system messages (index messages_system), which recall never returns.
    systemIds: db
      .prepare<[string], number>("SELECT id FROM messages WHERE session_id = ? AND role = 'system'")
      .pluck(),
    // The newest rows holding one word, up to an id, from the index alone
    // (FTS5 walks the word's list from the end and stops at the limit).
    wordRows: db
      .prepare<[string, number, number], number>(
        'SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? AND rowid <= ? ORDER BY rowid DESC LIMIT ?',
      )
      .pluck(),
    // The vocabulary (store/vocabulary.ts, migration 023).
    vocabularyBehind: db
      .prepare<[string, number], number>(
        `SELECT coalesce((SELECT id FROM messages WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1), 0)
          > (SELECT last_message_id FROM history_vocabulary WHERE id = 1)`,
      )
      .pluck(),
    vocabularyMark: db
      .prepare<[], number>('SELECT last_message_id FROM history_vocabulary WHERE id = 1')
      .pluck(),
    vocabularyUnread: db
      .prepare<[], number>(
        'SELECT EXISTS (SELECT 1 FROM messages WHERE id > (SELECT last_message_id FROM history_vocabulary WHERE id = 1))',
      )
      .pluck(),
    vocabularyMessages: db.prepare<[number, number], { id: number; content: string | null }>(
      'SELECT id, content FROM messages WHERE id > ? ORDER BY id LIMIT ?',
    ),
    setVocabularyMark: db.prepare<[number]>(
      'UPDATE history_vocabulary SET last_message_id = ? WHERE id = 1',
    ),
    insertWord: db.prepare<[string, string, number]>(
      'INSERT OR IGNORE INTO history_words (word, stem, messages) VALUES (?, ?, ?)',
    ),
    countWord: db.prepare<[number, string]>(
      'UPDATE history_words SET messages = messages + ? WHERE word = ?',
    ),
    insertWordKey: db.prepare<[string, string]>(
      'INSERT OR IGNORE INTO history_word_keys (key, word) VALUES (?, ?)',
    ),
    heldStems: db.prepare<[string], { stem: string; held: number }>(
      `SELECT j.value AS stem, sum(w.messages) AS held
        FROM json_each(?) j CROSS JOIN history_words w ON w.stem = j.value GROUP BY j.value`,
    ),
    wordCandidates: db.prepare<[string, number], KnownWord>(
      `SELECT DISTINCT w.word AS word, w.stem AS stem, w.messages AS messages
        FROM json_each(?) j CROSS JOIN history_word_keys k ON k.key = j.value
        CROSS JOIN history_words w ON w.word = k.word
        ORDER BY w.messages DESC, w.word LIMIT ?`,
    ),
    // The seq of a message by id: how far back a word's capped rows reach.
    seqOfId: db.prepare<[number], number>('SELECT seq FROM messages WHERE id = ?').pluck(),
    // The session's searchable rows holding one word, from the word's rows
    // in every session (CROSS JOIN as in searchHistory): for the words-alone plan.
    searchableWordRows: db
      .prepare<[string, number, string, number], number>(
        `SELECT m.id FROM messages_fts CROSS JOIN messages m ON m.id = messages_fts.rowid
        WHERE messages_fts MATCH ? AND messages_fts.rowid <= ?
          AND m.session_id = ? AND m.seq <= ? AND m.role <> 'system'`,
      )
      .pluck(),
    // The shortlist's rows, read by id (a JSON array), checked like searchableWordRows.
    recallRows: db.prepare<[string, string, number], RecallRow>(`SELECT m.id AS id, m.seq AS seq,
        m.role AS role, substr(m.content, 1, ${RECALL_CONTENT_CHARS}) AS content,
        m.created_at AS created_at, length(m.content) AS chars
      FROM json_each(?) j CROSS JOIN messages m ON m.id = j.value
      WHERE m.session_id = ? AND m.seq <= ? AND m.role <> 'system'`),
    recallContextRows: db.prepare<[string, string, number], RecallRow>(`SELECT m.id AS id,
        m.seq AS seq, m.role AS role,
        coalesce(substr(m.content, 1, ${RECALL_CONTENT_CHARS}), '') AS content,
        m.created_at AS created_at, coalesce(length(m.content), 0) AS chars
      FROM json_each(?) j CROSS JOIN messages m ON m.session_id = ? AND m.seq = j.value
      WHERE m.seq <= ? AND m.role <> 'system'`),
    resetSession: db.prepare(`UPDATE sessions SET
        message_count = (SELECT COUNT(*) FROM messages WHERE session_id = @id),
        input_tokens = 0, output_tokens = 0, cache_read_tokens = 0, cache_write_tokens = 0,
        compaction_input_tokens = 0, compaction_output_tokens = 0,
        compact_summary = NULL, compact_size = 0, compact_seq = 0, compaction_count = 0,
        last_prompt_tokens = NULL, last_prompt_seq = NULL, compaction_suspended = 0,
        epoch = epoch + 1, transcript_hash = NULL, updated_at = @updated_at
      WHERE id = @id`),
    // The newest open session of the agent whose visible transcript has this hash (index sessions_transcript).
    // Only the same key's, for the same end user: two users of one chat UI never share a session.
    sessionByTranscript: db.prepare<TranscriptLookup, SessionRow>(`SELECT * FROM sessions
      WHERE agent_name = @agent AND transcript_hash = @hash AND status = 'active'
        AND owner_key IS @owner_key AND end_user IS @end_user
      ORDER BY updated_at DESC LIMIT 1`),
    deleteConversation: db.prepare(
      "DELETE FROM messages WHERE session_id = ? AND role <> 'system'",
    ),
    deleteCompactions: db.prepare('DELETE FROM compactions WHERE session_id = ?'),
    closeSession: db.prepare("UPDATE sessions SET status = 'closed', updated_at = ? WHERE id = ?"),
    deleteSession: db.prepare('DELETE FROM sessions WHERE id = ?'),
    // A claim is taken when there is none, when it was made for another
    // pointer, or when its holder (not self) stopped heartbeating mid-summary.
    claimPreparation: db.prepare(`INSERT INTO prepared_compactions
        (session_id, holder, expected_size, expected_epoch, claimed_at)
      VALUES (@session, @holder, @size, @epoch, @now)
      ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,
        expected_size = excluded.expected_size, expected_epoch = excluded.expected_epoch,
        claimed_at = excluded.claimed_at, ${decide.PREPARED_COLUMNS.map((c) => `${c} = NULL`).join(', ')}
      WHERE prepared_compactions.expected_size <> excluded.expected_size
         OR prepared_compactions.expected_epoch <> excluded.expected_epoch
         OR (prepared_compactions.summary IS NULL AND prepared_compactions.holder <> excluded.holder
             AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = prepared_compactions.holder
                             AND i.heartbeat_at >= @live_since))`),
    finishPreparation: db.prepare(`UPDATE prepared_compactions SET
        ${decide.PREPARED_COLUMNS.map((c) => `${c} = ?`).join(', ')}
      WHERE session_id = ? AND holder = ? AND expected_size = ? AND expected_epoch = ?
        AND summary IS NULL`),
    findPreparation: db.prepare<[string], decide.StoredPreparationRow>(
      'SELECT * FROM prepared_compactions WHERE session_id = ?',
    ),
    dropPreparation: db.prepare(
      'DELETE FROM prepared_compactions WHERE session_id = @session AND (@holder IS NULL OR holder = @holder)',
    ),
    casCompaction: db.prepare(`UPDATE sessions SET
        compact_summary = @summary, compact_size = @to_size, compact_seq = @to_seq,
        compaction_count = compaction_count + 1,
        compaction_input_tokens = compaction_input_tokens + @input_tokens,
        compaction_output_tokens = compaction_output_tokens + @output_tokens,
        compaction_suspended = CASE WHEN @trigger = 'manual' THEN 0 ELSE compaction_suspended END,
        last_prompt_tokens = NULL, last_prompt_seq = NULL, updated_at = @updated_at
      WHERE id = @id AND compact_size = @expected_size AND epoch = COALESCE(@expected_epoch, epoch)`),
    insertCompaction: db.prepare<decide.CompactionRecord>(
      `INSERT INTO compactions (${decide.COMPACTION_COLUMNS.join(', ')})
      VALUES (${decide.COMPACTION_COLUMNS.map((column) => `@${column}`).join(', ')})`,
    ),
    latestCompaction: db.prepare<[string], decide.StoredCompactionRow>(
      'SELECT * FROM compactions WHERE session_id = ? ORDER BY id DESC LIMIT 1',
    ),
    listCompactions: db.prepare<[string], decide.StoredCompactionRow>(
      'SELECT * FROM compactions WHERE session_id = ? ORDER BY id',
    ),
    markUndone: db.prepare('UPDATE compactions SET undone_at = ? WHERE id = ?'),
    restoreCompaction: db.prepare(`UPDATE sessions SET
        compact_summary = @summary, compact_size = @size, compact_seq = @seq,
        compaction_count = MAX(compaction_count - 1, 0),
        last_prompt_tokens = NULL, last_prompt_seq = NULL, updated_at = @updated_at
      WHERE id = @id AND compact_size = @expected_size AND compact_seq = @expected_seq`),
    setSuspended: db.prepare('UPDATE sessions SET compaction_suspended = ? WHERE id = ?'),
    insertEvent: db.prepare(
      'INSERT INTO events (type, session_id, data, created_at) VALUES (?, ?, ?, ?)',
    ),
    eventsAfter: db.prepare<[number, number], EventRecord>(
      'SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?',
    ),
    sessionEventsAfter: db.prepare<[string, number, number], EventRecord>(
      'SELECT * FROM events WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?',
    ),
    ownerEventsAfter: db.prepare<
      OwnerEvents,
      EventRecord
    >(`SELECT * FROM events WHERE id > @after AND session_id IN
      (SELECT id FROM sessions WHERE owner_key = @owner_key) ORDER BY id LIMIT @limit`),
    // A task belongs to whoever owns its session.
    insertTask: db.prepare(`INSERT INTO tasks
      (id, session_id, agent_name, status, input, owner_instance, created_at, updated_at, owner_key, end_user)
      SELECT @id, @session_id, @agent_name, 'running', @input, @owner_instance, @created_at, @created_at,
        owner_key, end_user
      FROM sessions WHERE id = @session_id`),
    getTask: db.prepare<[string], TaskRow>('SELECT * FROM tasks WHERE id = ?'),
    waitingTask: db.prepare<[string], TaskRow>(
      "SELECT * FROM tasks WHERE session_id = ? AND status = 'waiting' ORDER BY created_at DESC LIMIT 1",
    ),
    sessionWithWaitingTaskId: db.prepare<[string], SessionRow & { waiting_task_id: string | null }>(
      `SELECT s.*, (SELECT t.id FROM tasks t WHERE t.session_id = s.id AND t.status = 'waiting'
         ORDER BY t.created_at DESC LIMIT 1) AS waiting_task_id
       FROM sessions s WHERE s.id = ?`,
    ),
    interruptTasks: db.prepare(
      `UPDATE tasks SET status = 'interrupted', error = '${INTERRUPTED_ERROR}', updated_at = ? WHERE status = 'running'`,
    ),
    interruptOwnedTasks: db.prepare(
      `UPDATE tasks SET status = 'interrupted', error = '${INTERRUPTED_ERROR}', updated_at = ? WHERE status = 'running' AND owner_instance = ?`,
    ),
    interruptOrphanedTasks: db.prepare(
      `UPDATE tasks SET status = 'interrupted', error = '${INSTANCE_LOST_ERROR}', updated_at = @now
       WHERE status = 'running' AND owner_instance IS NOT @self
         AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = tasks.owner_instance AND i.heartbeat_at >= @live_since)`,
    ),
    closeOrphanedDaemonSessions: db.prepare(
      `UPDATE sessions SET status = 'closed', updated_at = @now
       WHERE mode = 'daemon' AND status = 'active' AND (
         EXISTS (SELECT 1 FROM tasks t WHERE t.session_id = sessions.id AND t.status = 'running'
                 AND t.owner_instance IS NOT @self
                 AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = t.owner_instance AND i.heartbeat_at >= @live_since))
         OR EXISTS (SELECT 1 FROM daemon_runs d WHERE d.agent_name = sessions.agent_name
                    AND d.lease_owner IS NOT NULL AND d.lease_owner IS NOT @self
                    AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = d.lease_owner AND i.heartbeat_at >= @live_since)))`,
    ),
    heartbeatInstance: db.prepare(
      `INSERT INTO instances (id, started_at, heartbeat_at) VALUES (@id, @now, @now)
       ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at`,
    ),
    removeInstance: db.prepare('DELETE FROM instances WHERE id = ?'),
    releaseOrphanedLeases: db.prepare(
      `UPDATE daemon_runs SET lease_owner = NULL, lease_expires = NULL
       WHERE lease_owner IS NOT NULL AND lease_owner IS NOT @self
         AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = daemon_runs.lease_owner AND i.heartbeat_at >= @live_since)`,
    ),
    listMemory: db.prepare<[string, number], MemoryNote>(
      'SELECT agent_name, key, content, created_at, updated_at FROM memory WHERE agent_name = ? ORDER BY updated_at DESC, id DESC LIMIT ?',
    ),
    searchMemory: db.prepare<
      [string, string, number],
      MemoryNote
    >(`SELECT m.agent_name, m.key, m.content, m.created_at, m.updated_at
      FROM memory_fts JOIN memory m ON m.id = memory_fts.rowid
      WHERE memory_fts MATCH ? AND m.agent_name = ? ORDER BY rank LIMIT ?`),
    upsertMemory: db.prepare(`INSERT INTO memory (agent_name, key, content, created_at, updated_at)
      VALUES (@agent_name, @key, @content, @now, @now)
      ON CONFLICT (agent_name, key) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at`),
    getMemory: db.prepare<[string, string], MemoryNote>(
      'SELECT agent_name, key, content, created_at, updated_at FROM memory WHERE agent_name = ? AND key = ?',
    ),
    deleteMemory: db.prepare('DELETE FROM memory WHERE agent_name = ? AND key = ?'),
    getDaemon: db.prepare<[string], DaemonState>('SELECT * FROM daemon_runs WHERE agent_name = ?'),
    ensureDaemon: db.prepare(
      'INSERT INTO daemon_runs (agent_name) VALUES (?) ON CONFLICT (agent_name) DO NOTHING',
    ),
    claimDaemon: db.prepare(`UPDATE daemon_runs SET lease_owner = @owner, lease_expires = @expires
      WHERE agent_name = @agent AND (lease_owner IS NULL OR lease_expires < @now OR lease_owner = @owner)
        AND (@only_if_due = 0 OR next_run_at IS NULL OR next_run_at <= @now)`),
    finishDaemon: db.prepare(`UPDATE daemon_runs SET last_run_at = @last, next_run_at = @next,
        lease_owner = NULL, lease_expires = NULL
      WHERE agent_name = @agent AND lease_owner = @owner`),
    releaseDaemonLeases: db.prepare(
      'UPDATE daemon_runs SET lease_owner = NULL, lease_expires = NULL WHERE lease_owner IS NOT NULL',
    ),
    setDaemonNext: db.prepare('UPDATE daemon_runs SET next_run_at = ? WHERE agent_name = ?'),
    lastMessageSeq: db
      .prepare<[string], number | null>('SELECT MAX(seq) FROM messages WHERE session_id = ?')
      .pluck(),
    hasMessage: db
      .prepare<[string, number], 1>('SELECT 1 FROM messages WHERE session_id = ? AND seq = ?')
      .pluck(),
    // The fork's row is made from its parent's: columns added to sessions later
    // (owners, say) are copied here, in this one statement.
    insertFork: db.prepare(`INSERT INTO sessions
      (id, agent_name, mode, status, title, parent_session_id, created_at, updated_at,
       compact_count, compact_summary, compact_size, compaction_count, compact_seq, last_seq,
       owner_key, end_user)
      SELECT @id, agent_name, 'chat', 'active', title, NULL, @now, @now, compact_count,
        CASE WHEN @carry THEN compact_summary END, CASE WHEN @carry THEN compact_size ELSE 0 END,
        CASE WHEN @carry THEN compaction_count ELSE 0 END, CASE WHEN @carry THEN compact_seq ELSE 0 END,
        @at_seq, owner_key, end_user
      FROM sessions WHERE id = @source`),
    copyForkMessages: db.prepare(`INSERT INTO messages
      (session_id, seq, role, content, tool_calls, tool_call_id, name, created_at, chars, tokens, transcript_hash, answers_seq)
      SELECT @id, seq, role, content, tool_calls, tool_call_id, name, created_at, chars, tokens, transcript_hash, answers_seq
      FROM messages WHERE session_id = @source AND seq <= @at_seq ORDER BY seq`),
    copyForkCompactions: db.prepare(`INSERT INTO compactions
      (session_id, from_size, to_size, from_seq, to_seq, previous_summary, summary, trigger, model,
       input_chars, summary_chars, input_tokens, output_tokens, created_at, undone_at, dropped)
      SELECT @id, from_size, to_size, from_seq, to_seq, previous_summary, summary, trigger, model,
       input_chars, summary_chars, input_tokens, output_tokens, created_at, undone_at, dropped
      FROM compactions WHERE session_id = @source AND to_seq <= @at_seq ORDER BY id`),
    finishFork: db.prepare(`UPDATE sessions SET
        message_count = (SELECT COUNT(*) FROM messages WHERE session_id = @id),
        transcript_hash = (SELECT transcript_hash FROM messages
          WHERE session_id = @id AND transcript_hash IS NOT NULL ORDER BY seq DESC LIMIT 1)
      WHERE id = @id`),
    saveResponse: db.prepare(`INSERT INTO responses (id, session_id, end_seq, body, created_at)
      VALUES (@id, @session_id, @end_seq, @body, @created_at)
      ON CONFLICT (id) DO UPDATE SET end_seq = excluded.end_seq, body = excluded.body`),
    getResponse: db.prepare<[string], ResponseRecord>('SELECT * FROM responses WHERE id = ?'),
    findFrontEndChat: db
      .prepare<[FrontEndChatKey], string>(
        `SELECT session_id FROM front_end_chats WHERE ${FRONT_END_CHAT_MATCH}`,
      )
      .pluck(),
    bindFrontEndChat: db.prepare(`INSERT INTO front_end_chats
      (protocol, key_id, end_user, agent_name, chat_id, session_id, created_at, updated_at)
      VALUES (@protocol, @key_id, @end_user, @agent_name, @chat_id, @session_id, @now, @now)
      ON CONFLICT DO NOTHING`),
    rebindFrontEndChat: db.prepare(`UPDATE front_end_chats SET session_id = @to, updated_at = @now
      WHERE ${FRONT_END_CHAT_MATCH} AND session_id = @from`),
    openChatStream: db.prepare(`INSERT INTO chat_streams
      (session_id, stream_id, instance_id, ended, stop_requested, started_at)
      VALUES (@session, @stream, @instance, 0, 0, @now)
      ON CONFLICT (session_id) DO UPDATE SET stream_id = excluded.stream_id,
        instance_id = excluded.instance_id, ended = 0, stop_requested = 0,
        started_at = excluded.started_at`),
    dropChatStreamBatches: db.prepare(
      'DELETE FROM chat_stream_chunks WHERE session_id = @session AND stream_id <> @stream',
    ),
    appendChatStreamBatch: db.prepare(`INSERT INTO chat_stream_chunks
      (session_id, stream_id, seq, chunks)
      SELECT @session, @stream, @seq, @chunks
      WHERE EXISTS (SELECT 1 FROM chat_streams WHERE session_id = @session AND stream_id = @stream)`),
    endChatStream: db.prepare(
      'UPDATE chat_streams SET ended = 1 WHERE session_id = @session AND stream_id = @stream',
    ),
    chatStreamStop: db
      .prepare<{ session: string; stream: string }, number>(
        'SELECT stop_requested FROM chat_streams WHERE session_id = @session AND stream_id = @stream',
      )
      .pluck(),
    findChatStream: db.prepare<
      { session: string; self: string; live_since: string },
      ChatStreamRecord
    >(`SELECT stream_id, instance_id, ended, stop_requested,
        (instance_id = @self OR EXISTS (SELECT 1 FROM instances i
          WHERE i.id = chat_streams.instance_id AND i.heartbeat_at >= @live_since)) AS holder_live
      FROM chat_streams WHERE session_id = @session`),
    readChatStream: db.prepare<
      { session: string; stream: string; after: number },
      ChatStreamBatch
    >(`SELECT seq, chunks FROM chat_stream_chunks
      WHERE session_id = @session AND stream_id = @stream AND seq > @after ORDER BY seq`),
    requestChatStop: db.prepare(`UPDATE chat_streams SET stop_requested = 1
      WHERE session_id = @session AND ended = 0
        AND (instance_id = @self OR EXISTS (SELECT 1 FROM instances i
          WHERE i.id = chat_streams.instance_id AND i.heartbeat_at >= @live_since))`),
  };
}

type Statements = ReturnType<typeof prepareStatements>;

type FrontEndChatKey = ReturnType<typeof frontEndChatKey>;

interface ChatStreamRecord {
  stream_id: string;
  instance_id: string;
  ended: number;
  stop_requested: number;
  holder_live: number;
}

const FRONT_END_CHAT_MATCH = `protocol = @protocol AND key_id = @key_id AND end_user = @end_user
  AND agent_name = @agent_name AND chat_id = @chat_id`;

export interface SqliteStoreOptions {
  busyBudgetMs?: number;
  /** The owner of every task this store sets running. */
  instanceId?: string;
  /** SQLite's page cache, in MB (default: as SQLite was built). */
  cacheMb?: number;
  /**
   * Who copies the WAL back into the database file: a worker thread
   * (`background`, the default for a file; background-checkpoints.ts) or the
   * commit that crosses SQLite's 1 000-page mark, as SQLite does by default
   * (`inline`).
   */
  checkpoints?: 'background' | 'inline';
  /** Told when background checkpoints fail and the connection checkpoints itself again. */
  onCheckpointFallback?: (reason: string) => void;
}

/**
 * The `answers_seq` of an inserted message (migration 015): as computed, or
 * for a result whose assistant message was stored before this append, the
 * session's newest assistant message (a backward walk of the (session_id,
 * seq) index that stops at the first one).
 */
const NEWEST_ASSISTANT_OR_GIVEN = `CASE WHEN @answers_seq = ${decide.ANSWERS_NEWEST_ASSISTANT}
  THEN (SELECT a.seq FROM messages a WHERE a.session_id = @session_id AND a.role = 'assistant'
    ORDER BY a.seq DESC LIMIT 1)
  ELSE @answers_seq END`;

export class SqliteStore extends StoreBase implements Store {
  readonly kind = 'sqlite' as const;
  readonly db: SqliteDatabase;
  private readonly stmt: Statements;
  private readonly keyStmt: KeyStatements;
  protected readonly keys: SqliteKeys;

  private readonly busyBudgetMs: number;
  /** Every write goes through it: the writes of concurrent turns share a commit. */
  private readonly commits: GroupCommit;
  /** Which way a recall search reads the history index. */
  private readonly recallPlanner: RecallPlanner;
  /** The WAL's checkpoints, off the event loop (absent: in memory, or `checkpoints: 'inline'`). */
  readonly checkpoints: BackgroundCheckpoints | undefined;
  /** The owner of every task this store sets running, so recovery spares a live peer's tasks. */
  private readonly instanceId: string | null;
  /** The pending batch of the history index, if one is scheduled. */
  private historyIndexTimer: NodeJS.Timeout | undefined;
  protected readonly calls: SqliteCallRecords;
  protected readonly vectors: SqliteVectors;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    super();
    this.db = openDatabase(path, {
      busyTimeoutMs: SQLITE_SYNC_BUSY_TIMEOUT_MS,
      ...(options.cacheMb !== undefined ? { cacheMb: options.cacheMb } : {}),
    });
    this.stmt = prepareStatements(this.db);
    this.keyStmt = prepareKeyStatements(this.db);
    this.busyBudgetMs = options.busyBudgetMs ?? SQLITE_BUSY_TIMEOUT_MS;
    const checkpoints =
      path !== ':memory:' && options.checkpoints !== 'inline'
        ? new BackgroundCheckpoints(this.db, path, {
            ...(options.onCheckpointFallback ? { onFallback: options.onCheckpointFallback } : {}),
          })
        : undefined;
    this.checkpoints = checkpoints;
    this.commits = new GroupCommit(this.db, this.busyBudgetMs, () => checkpoints?.committed());
    this.recallPlanner = new RecallPlanner((match, cap) => this.stmt.countMatches.get(match, cap)!);
    this.keys = new SqliteKeys(this.keyStmt, (work) => this.write(work));
    this.instanceId = options.instanceId ?? null;
    this.calls = new SqliteCallRecords(this.db, (work) => this.write(work));
    this.vectors = new SqliteVectors(this.db, (work) => this.write(work));
    // A queue left by a rebuild of the index (migration 018) or a stop is
    // indexed in batches from start-up on, not only when a search needs it.
    if (this.stmt.anyQueued.get() !== undefined) this.scheduleHistoryIndex();
    // Likewise the vocabulary's messages (migration 023), from its mark on.
    if (this.stmt.vocabularyUnread.get() === 1) this.scheduleVocabulary();
  }

  /** The pending batch of the vocabulary, if one is scheduled. */
  private vocabularyTimer: NodeJS.Timeout | undefined;

  /** Schedules one vocabulary batch a moment from now, and the next while batches come full. */
  private scheduleVocabulary(delayMs = HISTORY_INDEX_DELAY_MS): void {
    if (this.vocabularyTimer !== undefined || !this.db.open) return;
    this.vocabularyTimer = setTimeout(() => {
      this.vocabularyTimer = undefined;
      if (!this.db.open) return;
      this.indexVocabularyBatch().then(
        (read) => {
          if (read === VOCABULARY_BATCH) this.scheduleVocabulary(0);
        },
        () => undefined,
      );
    }, delayMs);
    this.vocabularyTimer.unref();
  }

  async indexVocabularyBatch(): Promise<number> {
    return this.write(() => {
      const mark = this.stmt.vocabularyMark.get() ?? 0;
      const read = this.stmt.vocabularyMessages.all(mark, VOCABULARY_BATCH);
      if (read.length === 0) return 0;
      const counts = countWords(read.flatMap((m) => (m.content === null ? [] : [m.content])));
      for (const [word, count] of counts) {
        if (this.stmt.insertWord.run(word, stemOf(word), count).changes === 1) {
          for (const key of deletionKeys(word)) this.stmt.insertWordKey.run(key, word);
        } else {
          this.stmt.countWord.run(count, word);
        }
      }
      this.stmt.setVocabularyMark.run(read.at(-1)!.id);
      return read.length;
    });
  }

  protected async vocabularyBehind(sessionId: string, maxSeq: number): Promise<boolean> {
    return this.stmt.vocabularyBehind.get(sessionId, maxSeq) === 1;
  }

  protected async heldStems(stems: readonly string[]): Promise<Map<string, number>> {
    const rows = this.stmt.heldStems.all(JSON.stringify(stems));
    return new Map(rows.map((r) => [r.stem, r.held]));
  }

  protected async wordCandidates(words: readonly string[]): Promise<Map<string, KnownWord[]>> {
    return new Map(
      words.map((word) => [
        word,
        this.stmt.wordCandidates.all(JSON.stringify(queryKeys(word)), MAX_CANDIDATES),
      ]),
    );
  }

  /** Runs `work` (synchronous SQL) as a write: committed, with others asked for meanwhile, before it resolves. */
  private write<T>(work: () => T): Promise<T> {
    return this.commits.write(work);
  }

  /**
   * Indexes up to HISTORY_INDEX_BATCH queued messages for history_search in
   * one transaction; returns how many it took (0: the queue is empty).
   */
  async indexHistoryBatch(): Promise<number> {
    return this.write(() => {
      this.stmt.indexQueued.run(HISTORY_INDEX_BATCH);
      return this.stmt.unqueueIndexed.run(HISTORY_INDEX_BATCH).changes;
    });
  }

  /** Indexes every queued message (before a search: it must see every committed message). */
  async indexHistory(): Promise<void> {
    while ((await this.indexHistoryBatch()) === HISTORY_INDEX_BATCH) {
      // a full batch: more may be queued
    }
  }

  /**
   * Schedules one batch a moment from now, off the turn that appended. A
   * batch that fails (the database busy past the budget) leaves the queue as
   * it was: the next batch or search takes it, and a search reports the error.
   */
  private scheduleHistoryIndex(delayMs = HISTORY_INDEX_DELAY_MS): void {
    if (this.historyIndexTimer !== undefined || !this.db.open) return;
    this.historyIndexTimer = setTimeout(() => {
      this.historyIndexTimer = undefined;
      if (!this.db.open) return;
      this.indexHistoryBatch().then(
        (taken) => {
          if (taken === HISTORY_INDEX_BATCH) this.scheduleHistoryIndex(0);
        },
        () => undefined,
      );
    }, delayMs);
    this.historyIndexTimer.unref();
  }

  // ---- sessions -------------------------------------------------------------

  async createSession(input: NewSession): Promise<SessionRow> {
    const id = newId('sess');
    const createdAt = now();
    const system: ChatMessage[] = [{ role: 'system', content: input.systemPrompt }];
    const tokens = system.map(estimateMessageTokens);
    return this.write(() => {
      this.stmt.insertSession.run({
        id,
        agent_name: input.agentName,
        mode: input.mode,
        title: input.title ?? null,
        parent_session_id: input.parentSessionId ?? null,
        created_at: createdAt,
        compact_count: input.compactCount,
        ...decide.sessionOrigin(input),
      });
      this.insertMessages(id, system, tokens, {}, createdAt);
      return this.stmt.getSession.get(id)!;
    });
  }

  async updateSession(id: string, edit: SessionEdit): Promise<SessionRow | undefined> {
    return this.write(() => {
      this.stmt.updateSession.run({
        id,
        set_title: edit.title !== undefined ? 1 : 0,
        title: edit.title ?? null,
        compact_count: edit.compactCount ?? null,
        updated_at: now(),
      });
      return this.stmt.getSession.get(id);
    });
  }

  async createImportedSession(
    session: ImportedSession,
    owner: Owner = ADMIN_OWNER,
  ): Promise<string> {
    const id = newId('sess');
    await this.write(() =>
      this.stmt.insertImportedSession.run({
        ...session,
        id,
        owner_key: owner.key,
        end_user: owner.user ?? session.end_user ?? null,
      }),
    );
    return id;
  }

  protected async writeImportedMessages(
    sessionId: string,
    messages: readonly ImportedMessage[],
    tokens: readonly number[],
  ): Promise<void> {
    await this.write(() => {
      // The visible-transcript chain is rebuilt as the messages go in, so a
      // client resending the imported history lands in the imported session.
      const head = this.stmt.appendState.get(sessionId)?.transcript_hash ?? null;
      const { rows, transcript } = decide.chainMessages(
        sessionId,
        messages,
        tokens,
        head,
        'import',
      );
      for (const row of rows) this.stmt.insertMessage.run(row);
      this.scheduleHistoryIndex();
      this.stmt.bumpImported.run({
        id: sessionId,
        count: messages.length,
        last_seq: messages[messages.length - 1]!.seq,
        transcript_hash: transcript,
      });
    });
  }

  async appendImportedCompactions(
    sessionId: string,
    compactions: readonly ImportedCompaction[],
  ): Promise<void> {
    await this.write(() => {
      for (const c of compactions) {
        const dropped = decide.droppedText(c.dropped);
        this.stmt.insertCompaction.run({ ...c, dropped, session_id: sessionId });
      }
    });
  }

  async findSession(id: string): Promise<SessionRow | undefined> {
    return this.stmt.getSession.get(id);
  }

  async listSessions(filter: SessionFilter): Promise<Page<SessionRow>> {
    return this.newestFirst<SessionRow>('sessions', filter, decide.sessionFilterColumns(filter));
  }

  async resetSession(id: string): Promise<SessionRow | undefined> {
    return this.write(() => {
      if (this.stmt.getSession.get(id) === undefined) return undefined;
      this.stmt.deleteConversation.run(id);
      this.stmt.deleteCompactions.run(id);
      this.stmt.resetSession.run({ id, updated_at: now() });
      return this.stmt.getSession.get(id)!;
    });
  }

  async findSessionByTranscript(
    agentName: string,
    transcriptHash: string,
    owner: Owner,
  ): Promise<SessionRow | undefined> {
    return this.stmt.sessionByTranscript.get({
      agent: agentName,
      hash: transcriptHash,
      owner_key: owner.key,
      end_user: owner.user,
    });
  }

  async closeSession(id: string): Promise<SessionRow | undefined> {
    return this.write(() => {
      this.stmt.closeSession.run(now(), id);
      return this.stmt.getSession.get(id);
    });
  }

  async deleteSession(id: string): Promise<boolean> {
    return this.write(() => this.stmt.deleteSession.run(id).changes > 0);
  }

  async forkSession(id: string, atSeq?: number): Promise<ForkOutcome> {
    const forkId = newId('sess');
    return this.write(() => {
      const source = this.stmt.getSession.get(id);
      if (source === undefined) return { kind: 'no-session' as const };
      const at = atSeq ?? this.stmt.lastMessageSeq.get(id) ?? 0;
      if (this.stmt.hasMessage.get(id, at) === undefined) return { kind: 'no-message' as const };
      const carry = at >= source.compact_seq;
      const params = { id: forkId, source: id, at_seq: at };
      this.stmt.insertFork.run({ ...params, carry: carry ? 1 : 0, now: now() });
      this.stmt.copyForkMessages.run(params);
      this.vectors.copyToFork(params);
      if (carry) this.stmt.copyForkCompactions.run(params);
      this.stmt.finishFork.run({ id: forkId });
      this.scheduleHistoryIndex();
      return {
        kind: 'forked' as const,
        session: this.stmt.getSession.get(forkId)!,
      };
    });
  }

  // ---- responses ------------------------------------------------------------

  async saveResponse(response: Omit<ResponseRow, 'created_at'>): Promise<void> {
    await this.write(() =>
      this.stmt.saveResponse.run({
        ...response,
        body: JSON.stringify(response.body),
        created_at: now(),
      }),
    );
  }

  async findResponse(id: string): Promise<ResponseRow | undefined> {
    const row = this.stmt.getResponse.get(id);
    return row && toResponseRow(row);
  }

  // ---- front-end chats -------------------------------------------------------

  async findFrontEndChat(chat: FrontEndChat): Promise<string | undefined> {
    return this.stmt.findFrontEndChat.get(frontEndChatKey(chat));
  }

  async bindFrontEndChat(chat: FrontEndChat, sessionId: string): Promise<string> {
    const key = frontEndChatKey(chat);
    // One write transaction: whoever inserts first wins, the other reads the winner.
    return this.write(() => {
      this.stmt.bindFrontEndChat.run({ ...key, session_id: sessionId, now: now() });
      return this.stmt.findFrontEndChat.get(key)!;
    });
  }

  async rebindFrontEndChat(
    chat: FrontEndChat,
    fromSessionId: string,
    toSessionId: string,
  ): Promise<boolean> {
    return this.write(
      () =>
        this.stmt.rebindFrontEndChat.run({
          ...frontEndChatKey(chat),
          from: fromSessionId,
          to: toSessionId,
          now: now(),
        }).changes > 0,
    );
  }

  // ---- chat streams -----------------------------------------------------------

  async openChatStream(sessionId: string, streamId: string, instanceId: string): Promise<void> {
    const key = { session: sessionId, stream: streamId };
    await this.write(() => {
      this.stmt.openChatStream.run({ ...key, instance: instanceId, now: now() });
      this.stmt.dropChatStreamBatches.run(key);
    });
  }

  async writeChatStream(
    sessionId: string,
    streamId: string,
    batch: ChatStreamBatch | undefined,
    ended: boolean,
  ): Promise<{ stopRequested: boolean }> {
    const key = { session: sessionId, stream: streamId };
    return this.write(() => {
      if (batch) this.stmt.appendChatStreamBatch.run({ ...key, ...batch });
      if (ended) this.stmt.endChatStream.run(key);
      return { stopRequested: this.stmt.chatStreamStop.get(key) === 1 };
    });
  }

  async findChatStream(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<ChatStreamState | undefined> {
    const row = this.stmt.findChatStream.get({
      session: sessionId,
      self: liveness.self,
      live_since: new Date(Date.now() - liveness.staleAfterMs).toISOString(),
    });
    return (
      row && {
        streamId: row.stream_id,
        instanceId: row.instance_id,
        ended: row.ended === 1,
        stopRequested: row.stop_requested === 1,
        holderLive: row.holder_live === 1,
      }
    );
  }

  async readChatStream(
    sessionId: string,
    streamId: string,
    afterSeq: number,
  ): Promise<ChatStreamBatch[]> {
    return this.stmt.readChatStream.all({ session: sessionId, stream: streamId, after: afterSeq });
  }

  async requestChatStop(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<boolean> {
    return this.write(
      () =>
        this.stmt.requestChatStop.run({
          session: sessionId,
          self: liveness.self,
          live_since: new Date(Date.now() - liveness.staleAfterMs).toISOString(),
        }).changes > 0,
    );
  }

  // ---- messages -------------------------------------------------------------

  protected writeMessages(append: PendingAppend): Promise<StoredMessage[]> {
    return this.write(() => this.appendNow(append, undefined).messages);
  }

  protected writeMessagesWithEvents(
    append: PendingAppend,
    eventType: string,
  ): Promise<{ messages: StoredMessage[]; events: EventRow[] }> {
    return this.write(() => this.appendNow(append, eventType));
  }

  /**
   * One append, inside the writer's transaction: refused unless its task is
   * still running, then the messages, an event each when `eventType` is
   * given, and the model calls that commit with them.
   */
  private appendNow(
    append: PendingAppend,
    eventType: string | undefined,
  ): { messages: StoredMessage[]; events: EventRow[] } {
    const { sessionId, messages, tokens, options } = append;
    const createdAt = now();
    this.requireRunning(options.runningTask);
    const stored = this.insertMessages(sessionId, messages, tokens, options, createdAt);
    const events =
      eventType === undefined
        ? []
        : stored.map((m) =>
            this.insertEvent(decide.messageEvent(eventType, sessionId, m), createdAt),
          );
    if (options.modelCalls !== undefined) this.calls.insertCalls(options.modelCalls, sessionId);
    return { messages: stored, events };
  }

  /**
   * The inserts of one append, inside the caller's transaction. `tokens` are
   * the messages' estimates, computed by the caller before the transaction
   * (encoding is CPU work that must not hold the write lock).
   */
  private insertMessages(
    sessionId: string,
    messages: ChatMessage[],
    tokens: readonly number[],
    options: AppendOptions,
    createdAt: string,
  ): StoredMessage[] {
    const state = this.stmt.appendState.get(sessionId);
    const lastSeq = state?.last_seq ?? 0;
    const numbered = decide.numberMessages(messages, lastSeq, createdAt);
    const head = state?.transcript_hash ?? null;
    const { rows, transcript } = decide.chainMessages(sessionId, numbered, tokens, head, 'append');
    // Each row carries its token estimate: context reads return it instead of re-encoding.
    try {
      for (const row of rows) this.stmt.insertMessage.run(row);
    } catch (err) {
      throw secondResultError(err) ?? err;
    }
    this.scheduleHistoryIndex();
    const counters = decide.appendCounters(options, messages.length, lastSeq + messages.length);
    const owner = this.stmt.bumpSession.get({
      ...counters,
      id: sessionId,
      transcript_hash: transcript,
      updated_at: createdAt,
    });
    chargeKeyTokens(this.keyStmt, owner?.owner_key ?? null, counters.charged);
    const stored = rows.map(toStoredMessage);
    return stored;
  }

  async listMessages(
    sessionId: string,
    options: { afterSeq: number; limit: number },
  ): Promise<StoredMessage[]> {
    const rows = this.stmt.pageMessages.all(sessionId, options.afterSeq, options.limit);
    return rows.map(toStoredMessage);
  }

  async loadContext(
    sessionId: string,
    afterSeq: number,
  ): Promise<{ system: StoredMessage[]; tail: StoredMessage[] }> {
    // No read transaction needed: the system messages are written once, with
    // the session, so they cannot change between the two reads.
    return {
      system: this.stmt.systemMessages.all(sessionId).map(toStoredMessage),
      tail: this.stmt.tailMessages.all(sessionId, afterSeq).map(toStoredMessage),
    };
  }

  async listMessageMeta(sessionId: string, afterSeq: number): Promise<MessageMeta[]> {
    const metas: MessageMeta[] = [];
    for (const row of this.stmt.messageMeta.iterate(sessionId, afterSeq))
      metas.push(toMessageMeta(row));
    return metas;
  }

  async listTail(sessionId: string, afterSeq: number, limit: number): Promise<StoredMessage[]> {
    return this.stmt.tailPage.all(sessionId, afterSeq, limit).map(toStoredMessage);
  }

  async firstUserMessages(
    sessionIds: readonly string[],
    maxChars: number,
  ): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    for (const id of sessionIds) {
      const content = this.stmt.firstUserMessage.get({ id, max: maxChars })?.content;
      if (content != null) found.set(id, content);
    }
    return found;
  }

  async searchHistory(sessionId: string, query: string, limit: number): Promise<HistoryHit[]> {
    const words = searchWords(query);
    if (words.length === 0) return [];
    await this.indexHistory();
    const length = this.stmt.appendState.get(sessionId)?.last_seq ?? 0;
    const terms = words.map((w) => `"${w}"`);
    const match = this.sessionSearch(sessionId, terms, length);
    return this.stmt.searchHistory.all(match, sessionId, limit);
  }

  protected async recall({
    sessionId,
    words,
    maxSeq,
    limit,
  }: RecallSearch): Promise<RecallShortlist> {
    // Recall reads only compacted messages (seq <= maxSeq). The turn's own
    // appends lie above the pointer, so indexing the queue before every model
    // call would add a write transaction to the turn for rows the search
    // cannot return; index first only when a searchable row is still queued.
    if (this.stmt.queuedUpTo.get(sessionId, maxSeq)) await this.indexHistory();
    const ranked = words.slice(0, MAX_RANKED_TERMS);
    const bound = this.stmt.recallBound.get(sessionId, maxSeq);
    if (bound === undefined) return { rows: [], weights: [], evidence: [] };
    const read = this.rowsHolding(sessionId, ranked.map(ftsTerm), maxSeq, bound);
    const evidence = evidenceWords(
      read.map((r) => r.df),
      maxSeq,
    );
    // A row read only for words that are no evidence is no candidate.
    const { weights, picked } = shortlist(
      read.map((r, i) => (evidence[i] ? r.rows : [])),
      maxSeq,
      limit * SHORTLIST_PER_HIT,
      read.map((r) => r.df),
    );
    if (picked.length === 0) return { rows: [], weights, evidence };
    const held = new Map(picked.map((p) => [p.id, p.held]));
    const rows = this.stmt.recallRows
      .all(JSON.stringify(picked.map((p) => p.id)), sessionId, maxSeq)
      .map((row) => recallRead(row, held.get(row.id) ?? 0));
    return { rows, weights, evidence };
  }

  protected async recallContext(
    sessionId: string,
    seqs: readonly number[],
    maxSeq: number,
  ): Promise<RecallRead[]> {
    return this.stmt.recallContextRows
      .all(JSON.stringify(seqs), sessionId, maxSeq)
      .map((row) => recallRead(row, 0));
  }

  /**
   * Each of `terms`' (FTS expressions) rows among the session's searchable
   * ones (seq <= maxSeq, not system; `bound` the last one's id), and the
   * term's document frequency there. Bounded whatever the session's length:
   * - a word rare in the whole index (recall-plan.ts) is read alone, all of
   *   its rows, each checked;
   * - another is read with the session named in the MATCH, newest first, at
   *   most TERM_ROWS_CAP rows; past the cap its frequency is estimated from
   *   how far back the rows reach (estimateFrequency);
   * - in a long session (COMMON_SKIP_MIN_MESSAGES), a word remembered as
   *   common there (COMMON_SHARE) is not read again: it weighs little, and it still counts when the rows the other
   *   words find are ranked. If every word is common, the least common is read.
   */
  private rowsHolding(
    sessionId: string,
    terms: readonly string[],
    maxSeq: number,
    bound: number,
  ): { rows: number[]; df: number }[] {
    const planner = this.recallPlanner;
    const shares = terms.map((term) => planner.knownShare(sessionId, term, maxSeq));
    const common = shares.map((share) => share !== undefined && share >= COMMON_SHARE);
    if (common.every(Boolean) && terms.length > 0) {
      const least = shares.indexOf(Math.min(...shares.map((share) => share ?? 1)));
      common[least] = false;
    }
    let system: Set<number> | undefined;
    return terms.map((term, i) => {
      if (common[i]) return { rows: [], df: Math.round(shares[i]! * maxSeq) };
      let rows: number[];
      if (planner.rareInIndex(term, maxSeq)) {
        rows = this.stmt.searchableWordRows.all(`content : ${term}`, bound, sessionId, maxSeq);
      } else {
        system ??= new Set(this.stmt.systemIds.all(sessionId));
        const own = system;
        rows = this.stmt.wordRows
          .all(sessionMatch(sessionId, term), bound, TERM_ROWS_CAP + 1)
          .filter((id) => !own.has(id));
      }
      let df = rows.length;
      if (rows.length > TERM_ROWS_CAP) {
        rows = rows.slice(0, TERM_ROWS_CAP);
        const oldest = this.stmt.seqOfId.get(rows.at(-1)!) ?? 1;
        df = estimateFrequency(TERM_ROWS_CAP, maxSeq - oldest + 1, maxSeq);
      }
      planner.rememberShare(sessionId, term, df, maxSeq);
      return { rows, df };
    });
  }

  /**
   * The MATCH for any of `terms` (quoted FTS terms) in a session of `length`
   * messages to search: the session named, or the words alone when that is
   * the shorter read (recall-plan.ts). The statement's join keeps the
   * session's rows either way, and both rank on the content column.
   */
  private sessionSearch(sessionId: string, terms: readonly string[], length: number): string {
    const fts = terms.join(' OR ');
    return this.recallPlanner.plan(terms, length) === 'words'
      ? `content : (${fts})`
      : sessionMatch(sessionId, fts);
  }

  // ---- compaction -----------------------------------------------------------

  async commitCompaction(input: NewCompaction): Promise<SessionRow | undefined> {
    return this.writeForTask(input.runningTask, () => {
      const before = this.stmt.getSession.get(input.sessionId);
      if (!decide.compactionApplies(before, input)) return undefined;
      const record = decide.compactionRecord(input, before, now());
      const result = this.stmt.casCompaction.run({
        ...record,
        id: input.sessionId,
        expected_size: input.expectedSize,
        expected_epoch: input.expectedEpoch ?? null,
        updated_at: record.created_at,
      });
      if (result.changes === 0) return undefined;
      this.stmt.insertCompaction.run(record);
      // Compaction spends the session owner's tokens like any model call.
      const spent = record.input_tokens + record.output_tokens;
      chargeSessionTokens(this.keyStmt, input.sessionId, spent);
      return this.stmt.getSession.get(input.sessionId)!;
    });
  }

  async undoCompaction(
    sessionId: string,
  ): Promise<{ session: SessionRow; restoredSize: number } | undefined> {
    return this.write(() => {
      const latest = this.stmt.latestCompaction.get(sessionId);
      if (!decide.undoApplies(latest)) return undefined;
      const updatedAt = now();
      const result = this.stmt.restoreCompaction.run({
        id: sessionId,
        summary: latest.previous_summary,
        size: latest.from_size,
        seq: latest.from_seq,
        expected_size: latest.to_size,
        expected_seq: latest.to_seq,
        updated_at: updatedAt,
      });
      if (result.changes === 0) return undefined;
      this.stmt.markUndone.run(updatedAt, latest.id);
      return {
        session: this.stmt.getSession.get(sessionId)!,
        restoredSize: latest.from_size,
      };
    });
  }

  async listCompactions(sessionId: string): Promise<CompactionRow[]> {
    return this.stmt.listCompactions.all(sessionId).map(decide.compactionFromRow);
  }

  async setCompactionSuspended(sessionId: string, suspended: boolean): Promise<void> {
    await this.write(() => this.stmt.setSuspended.run(suspended ? 1 : 0, sessionId));
  }

  // ---- prepared compactions ------------------------------------------------

  async claimPreparation(claim: PreparationClaim): Promise<boolean> {
    const liveSince = new Date(Date.now() - claim.staleAfterMs).toISOString();
    return this.write(
      () =>
        this.stmt.claimPreparation.run({
          session: claim.sessionId,
          holder: claim.holder,
          size: claim.expectedSize,
          epoch: claim.expectedEpoch,
          now: now(),
          live_since: liveSince,
        }).changes > 0,
    );
  }

  async finishPreparation(prepared: PreparedSummary): Promise<boolean> {
    const pointer = [
      prepared.sessionId,
      prepared.holder,
      prepared.expectedSize,
      prepared.expectedEpoch,
    ];
    return this.write(
      () =>
        this.stmt.finishPreparation.run(...decide.preparedValues(prepared, now()), ...pointer)
          .changes > 0,
    );
  }

  async findPreparation(sessionId: string): Promise<PreparedCompactionRow | undefined> {
    const row = this.stmt.findPreparation.get(sessionId);
    return row === undefined ? undefined : decide.preparationFromRow(row);
  }

  async dropPreparation(sessionId: string, holder?: string): Promise<void> {
    await this.write(() =>
      this.stmt.dropPreparation.run({ session: sessionId, holder: holder ?? null }),
    );
  }

  // ---- events ---------------------------------------------------------------

  async appendEvent(event: NewEvent): Promise<EventRow> {
    return this.write(() => this.insertEvent(event, now()));
  }

  private insertEvent(event: NewEvent, createdAt: string): EventRow {
    const data = JSON.stringify(event.data);
    const result = this.stmt.insertEvent.run(event.type, event.sessionId ?? null, data, createdAt);
    return decide.storedEvent(Number(result.lastInsertRowid), event, createdAt);
  }

  async listEvents(options: EventFilter): Promise<EventRow[]> {
    const { afterId, sessionId, ownerKey, limit } = options;
    // A session id narrows further; the owner filter still applies (the session may be another key's).
    const rows: EventRecord[] =
      sessionId !== undefined
        ? this.stmt.sessionEventsAfter.all(sessionId, afterId, limit)
        : ownerKey !== undefined
          ? this.stmt.ownerEventsAfter.all({ after: afterId, owner_key: ownerKey, limit })
          : this.stmt.eventsAfter.all(afterId, limit);
    const events = rows.map(toEventRow);
    if (sessionId === undefined || ownerKey === undefined) return events;
    const session = this.stmt.getSession.get(sessionId);
    return session?.owner_key === ownerKey ? events : [];
  }

  // ---- tasks ----------------------------------------------------------------

  async createTask(input: NewTask): Promise<TaskRow> {
    const id = newId('task');
    return this.write(() => {
      const inserted = this.stmt.insertTask.run({
        id,
        session_id: input.sessionId,
        agent_name: input.agentName,
        input: input.input,
        owner_instance: this.instanceId,
        created_at: now(),
      });
      if (inserted.changes === 0) throw sessionNotFound(input.sessionId);
      return this.stmt.getTask.get(id)!;
    });
  }

  async findTask(id: string): Promise<TaskRow | undefined> {
    return this.stmt.getTask.get(id);
  }

  async listTasks(filter: TaskFilter): Promise<Page<TaskRow>> {
    return this.newestFirst<TaskRow>('tasks', filter, decide.taskFilterColumns(filter));
  }

  async transitionTask(
    id: string,
    from: readonly TaskStatus[],
    patch: TaskPatch,
  ): Promise<TaskRow | undefined> {
    const patched = decide.taskPatchColumns(patch).map((column) => `${column} = @${column}`);
    const assignments = [...patched, 'updated_at = @updated_at'];
    const statusList = from.map((_, i) => `@from${i}`).join(', ');
    // A task set running is this instance's to run (and to be interrupted with it).
    if (patch.status === 'running') assignments.push('owner_instance = @owner_instance');
    const params: Record<string, unknown> = {
      id,
      updated_at: now(),
      owner_instance: this.instanceId,
      self: this.instanceId,
      ...patch,
    };
    from.forEach((status, i) => (params[`from${i}`] = status));
    return this.write(() => {
      const result = this.db
        .prepare(
          `UPDATE tasks SET ${assignments.join(', ')} WHERE id = @id AND status IN (${statusList})
                 AND (status <> 'running' OR owner_instance IS NULL OR owner_instance IS @self)`,
        )
        .run(params);
      if (result.changes === 0) return undefined;
      return this.stmt.getTask.get(id);
    });
  }

  async findWaitingTaskForSession(sessionId: string): Promise<TaskRow | undefined> {
    return this.stmt.waitingTask.get(sessionId);
  }

  async findSessionWithWaitingTask(
    sessionId: string,
  ): Promise<{ session: SessionRow | undefined; waitingTask: TaskRow | undefined }> {
    // One statement (a turn's first read, the costliest): the waiting task's
    // id comes with the session, and the task itself is read only when there is one.
    const found = this.stmt.sessionWithWaitingTaskId.get(sessionId);
    if (found === undefined) return { session: undefined, waitingTask: undefined };
    const { waiting_task_id: waitingTaskId, ...session } = found;
    return {
      session,
      waitingTask: waitingTaskId === null ? undefined : this.stmt.getTask.get(waitingTaskId),
    };
  }

  async interruptRunningTasks(ownerInstance?: string): Promise<number> {
    return this.write(() =>
      ownerInstance === undefined
        ? this.stmt.interruptTasks.run(now()).changes
        : this.stmt.interruptOwnedTasks.run(now(), ownerInstance).changes,
    );
  }

  // ---- instances ------------------------------------------------------------

  async heartbeatInstance(instanceId: string): Promise<void> {
    await this.write(() => this.stmt.heartbeatInstance.run({ id: instanceId, now: now() }));
  }

  async removeInstance(instanceId: string): Promise<void> {
    await this.write(() => this.stmt.removeInstance.run(instanceId));
  }

  async releaseOrphanedDaemonLeases(scope: OrphanScope): Promise<number> {
    const { self, live_since } = orphanParams(scope);
    return this.write(() => this.stmt.releaseOrphanedLeases.run({ self, live_since }).changes);
  }

  async closeOrphanedDaemonSessions(scope: OrphanScope): Promise<number> {
    return this.write(() => this.stmt.closeOrphanedDaemonSessions.run(orphanParams(scope)).changes);
  }

  async interruptOrphanedTasks(scope: OrphanScope): Promise<number> {
    return this.write(() => this.stmt.interruptOrphanedTasks.run(orphanParams(scope)).changes);
  }

  // ---- daemons --------------------------------------------------------------

  async findDaemonState(agentName: string): Promise<DaemonState | undefined> {
    return this.stmt.getDaemon.get(agentName);
  }

  async releaseDaemonLeases(): Promise<number> {
    return this.write(() => this.stmt.releaseDaemonLeases.run().changes);
  }

  async claimDaemonLease(
    agentName: string,
    owner: string,
    now: Date,
    leaseMs: number,
    onlyIfDue = false,
  ): Promise<boolean> {
    return this.write(() => {
      this.stmt.ensureDaemon.run(agentName);
      const result = this.stmt.claimDaemon.run({
        agent: agentName,
        owner,
        now: now.toISOString(),
        expires: new Date(now.getTime() + leaseMs).toISOString(),
        only_if_due: onlyIfDue ? 1 : 0,
      });
      return result.changes > 0;
    });
  }

  protected finishRun(run: FinishedRun): Promise<boolean> {
    const finished = { agent: run.agentName, owner: run.owner, last: run.lastRunAt };
    return this.write(
      () => this.stmt.finishDaemon.run({ ...finished, next: run.nextRunAt }).changes > 0,
    );
  }

  async setDaemonNextRun(agentName: string, nextRunAt: Date | null): Promise<void> {
    await this.write(() => {
      this.stmt.ensureDaemon.run(agentName);
      this.stmt.setDaemonNext.run(nextRunAt?.toISOString() ?? null, agentName);
    });
  }

  // ---- memory ---------------------------------------------------------------

  async listMemory(agentName: string, query?: string, limit = MEMORY_PAGE): Promise<MemoryNote[]> {
    if (query !== undefined && query.trim() !== '') {
      const fts = toFtsQuery(query);
      if (fts === undefined) return [];
      return this.stmt.searchMemory.all(fts, agentName, limit);
    }
    return this.stmt.listMemory.all(agentName, limit);
  }

  async putMemory(
    agentName: string,
    key: string,
    content: string,
    options: MemoryWriteOptions = {},
  ): Promise<MemoryNote> {
    return this.writeForTask(options.runningTask, () => {
      this.stmt.upsertMemory.run({ agent_name: agentName, key, content, now: now() });
      return this.stmt.getMemory.get(agentName, key)!;
    });
  }

  async deleteMemory(
    agentName: string,
    key: string,
    options: MemoryWriteOptions = {},
  ): Promise<boolean> {
    return this.writeForTask(
      options.runningTask,
      () => this.stmt.deleteMemory.run(agentName, key).changes > 0,
    );
  }

  /** `work` in the writer's transaction, refused (SESSION_LOCK_LOST) unless `task`, if given, is still this instance's running task. */
  private writeForTask<T>(task: string | undefined, work: () => T): Promise<T> {
    return this.write(() => {
      this.requireRunning(task);
      return work();
    });
  }

  /** Inside a write's transaction: `task`, when given, is still this instance's running task. */
  private requireRunning(task: string | undefined): void {
    if (task !== undefined) requireRunningTask(task, this.stmt.getTask.get(task), this.instanceId);
  }

  async ping(): Promise<void> {
    await retryWhileBusy(() => this.db.prepare('SELECT 1').get(), this.busyBudgetMs);
  }

  async close(): Promise<void> {
    // Queued messages stay queued in the file; the next search indexes them.
    clearTimeout(this.historyIndexTimer);
    this.historyIndexTimer = undefined;
    clearTimeout(this.vocabularyTimer);
    this.vocabularyTimer = undefined;
    // Writes already asked for are committed, not dropped.
    if (this.db.open) await this.commits.drain();
    await this.checkpoints?.close();
    if (this.db.open) this.db.close();
  }

  /** A keyset page of `table`, newest first (`newestFirstQuery`). */
  private newestFirst<T extends { created_at: string; id: string }>(
    table: 'sessions' | 'tasks',
    page: { limit: number; cursor?: string },
    equals: Record<string, string | undefined>,
  ): Page<T> {
    const query = decide.newestFirstQuery(`SELECT * FROM ${table}`, equals, page, () => '?');
    const rows = this.db.prepare<unknown[], T>(query.sql).all(...query.params);
    return decide.newestFirstPage(rows, page.limit);
  }
}
