/**
 * The storage seam. Everything Cairn persists goes through `Store`, the
 * intersection of one small interface per kind of record (sessions, message
 * log, compactions, events, tasks, instances, daemon leases, memory, client
 * keys, model-call records, responses); consumers are typed with only the
 * parts they use, so a fake can be built part by part. SQLite (the default)
 * and Postgres (several instances on one database) both implement it, and the
 * runtime never knows which; what the two decide the same way is written once
 * (decisions.ts, records.ts, model-call-rows.ts, store-base.ts). Each method
 * is one unit of work: implementations commit it in one transaction before the
 * returned promise resolves, so callers never hold a transaction across an
 * `await`.
 */
import type { ChatMessage, StoredMessage, TokenUsage, ToolCall } from '../llm/messages.js';
import type { FallbackHop } from '../llm/model-client.js';

export type SessionMode = 'chat' | 'task' | 'subagent' | 'daemon';

/**
 * Who a row belongs to: the client key that created it (null: the admin) and
 * the end user that key named (null: none).
 */
export interface Owner {
  key: string | null;
  user: string | null;
}

/** The admin's own rows (and every row of a database from before keys). */
export const ADMIN_OWNER: Owner = { key: null, user: null };
export type SessionStatus = 'active' | 'closed';

/** A session row exactly as stored (snake_case, as the API returns it). */
export interface SessionRow {
  id: string;
  agent_name: string;
  mode: SessionMode;
  status: SessionStatus;
  title: string | null;
  parent_session_id: string | null;
  created_at: string;
  updated_at: string;
  message_count: number;
  input_tokens: number;
  output_tokens: number;
  /** Rolling summary of the compacted prefix; null until the first compaction. */
  compact_summary: string | null;
  /** How many non-system messages the summary covers. */
  compact_size: number;
  /** Percent of the uncompacted context to compact per call (snapshotted at creation). */
  compact_count: number;
  /** How many compactions ran on this session. */
  compaction_count: number;
  /** Seq of the last compacted message; the raw tail starts after it. */
  compact_seq: number;
  /** Prompt tokens the model reported for the last call, for the auto-compaction estimate. */
  last_prompt_tokens: number | null;
  /** Highest seq that the last reported prompt covered. */
  last_prompt_seq: number | null;
  /** 1 while automatic compaction is suspended for this session (breaker tripped). */
  compaction_suspended: number;
  /** Incremented by every reset, so work that started before a reset cannot land after it. */
  epoch: number;
  /** The highest seq this session ever used; seqs are never reused, even after a reset. */
  last_seq: number;
  /** Hash chain head of the visible transcript (src/store/transcript-hash.ts); null while it is empty. */
  transcript_hash: string | null;
  /** Tokens the summary calls of this session's compactions read and wrote (summed). */
  compaction_input_tokens: number;
  compaction_output_tokens: number;
  /** What this session's model calls cost, summed, by the roles' pricing (0 when unpriced). */
  cost: number;
  /** Of input_tokens, those the provider served from its prompt cache, and those it wrote to it. */
  cache_read_tokens: number;
  cache_write_tokens: number;
  /** The client key that created the session; null for the admin. */
  owner_key: string | null;
  /** The end user the key named (`X-Cairn-User`, or `user` on /v1); null when none. */
  end_user: string | null;
}

export interface NewSession {
  agentName: string;
  mode: SessionMode;
  title?: string | null;
  parentSessionId?: string | null;
  compactCount: number;
  /** The agent's system prompt, stored as the first message (a snapshot). */
  systemPrompt: string;
  /** Default: the admin. */
  owner?: Owner;
  /**
   * Where the visible-transcript chain starts (default: nothing). A
   * conversation from /v1 starts it from its scope and the client's system
   * messages, so two conversations that differ there never match.
   */
  transcriptSeed?: string | null;
}

/** `PATCH /sessions/:id`: the fields a client may change after creation. */
export interface SessionEdit {
  title?: string | null;
  compactCount?: number;
}

/**
 * A session row as an export carries it, written under a new id by an import.
 * Counters that follow from the messages (message_count, last_seq) are
 * recomputed by the store as the messages arrive.
 */
export type ImportedSession = Omit<
  SessionRow,
  // The transcript hash is rebuilt from the imported messages, never taken from the file;
  // the importer owns what it imports, whatever the file says.
  | 'id'
  | 'message_count'
  | 'last_seq'
  | 'epoch'
  | 'parent_session_id'
  | 'transcript_hash'
  | 'owner_key'
  | 'end_user'
> & { end_user?: string | null };

/** A message as an export carries it: its seq and time are kept. */
export interface ImportedMessage extends ChatMessage {
  seq: number;
  created_at: string;
}

/** A compaction row as an export carries it (its id and session are new). */
export type ImportedCompaction = Omit<CompactionRow, 'id' | 'session_id' | 'dropped'> & {
  /** Absent or null: an export from before `dropped` was recorded. */
  dropped?: CompactionRow['dropped'];
};

export interface SessionFilter {
  agentName?: string;
  status?: SessionStatus;
  mode?: SessionMode;
  parentSessionId?: string;
  /** Only the sessions of this client key (a client key's view). */
  ownerKey?: string;
  /** Only the sessions of this end user. */
  endUser?: string;
  limit: number;
  /** Opaque cursor returned as `nextCursor` by the previous page. */
  cursor?: string;
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** A message to append plus the token usage of the model call that produced it. */
export interface AppendOptions {
  usage?: TokenUsage;
  /** Prompt tokens reported for the call, recorded for the auto-compaction estimate. */
  promptTokens?: number;
  /**
   * The task whose run appends: nothing is appended (SESSION_LOCK_LOST) unless
   * it is still `running` and owned by this store's instance. A peer that
   * declared this instance dead has marked it `interrupted` (or resumed it,
   * owning it now): a run that wakes up after a pause must not write on.
   */
  runningTask?: string;
  /**
   * Model calls of the session to record in the same write: a turn's reply
   * and the call that produced it commit together (one commit, not two).
   * Every call must belong to the session appended to.
   */
  modelCalls?: readonly NewModelCall[];
  /**
   * Write only if the session row is still at this version (one an earlier
   * append returned with the row): when anything changed the row since — a
   * peer's turn, a manual compaction, a new title — nothing is written and
   * the append fails with `SessionMovedError`. Only a store that returns
   * versions (Postgres) is ever given one.
   */
  ifVersion?: string;
}

/** A session row as a write left it, with the version a later write can be conditioned on. */
export interface VersionedSession {
  row: SessionRow;
  version: string;
}

/** What `appendMessagesWithEvents` stored. */
export interface AppendedWithEvents {
  messages: StoredMessage[];
  events: EventRow[];
  /** The session row after the append; only from a store that versions rows. */
  session?: VersionedSession;
}

export interface EventRow {
  id: number;
  type: string;
  session_id: string | null;
  data: Record<string, unknown>;
  created_at: string;
}

export interface NewEvent {
  type: string;
  sessionId?: string | null;
  data: Record<string, unknown>;
}

export type TaskStatus =
  'running' | 'waiting' | 'completed' | 'failed' | 'cancelled' | 'interrupted';

export interface TaskRow {
  id: string;
  session_id: string;
  agent_name: string;
  status: TaskStatus;
  input: string;
  result: string | null;
  question: string | null;
  error: string | null;
  /** The tool call id a waiting task is waiting on (`ask_user`, or a call awaiting approval). */
  pending_call_id: string | null;
  /** Waiting for approval: the name of the tool the pending call wants to run; else null. */
  pending_tool: string | null;
  /** Waiting for approval: the pending call's arguments, raw JSON text as the model sent them. */
  pending_arguments: string | null;
  /** Waiting for approval of a tool with an approvalTimeout: when the call is denied (ISO time). */
  approval_expires_at: string | null;
  /** The instance that set the task running; null for tasks of older builds. */
  owner_instance: string | null;
  /** The client key of the task's session; null for the admin. */
  owner_key: string | null;
  end_user: string | null;
  /** Who approved or denied the task's last held call: JSON `{key, user}`; null until decided. */
  decided_by: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * A detail of the folded messages that a compaction's summary does not
 * contain (an identifier, number, date, quoted string or name), with the seq
 * of the message it was found in.
 */
/** A compaction records at most this many dropped items. */
export const MAX_DROPPED_ITEMS = 50;

/**
 * What started a compaction: a request (`manual`), a turn at the agent's
 * threshold (`auto`), or a summary prepared off the turn and landed at the
 * next turn's start (`background`).
 */
export type CompactionTrigger = 'manual' | 'auto' | 'background';

export interface DroppedItem {
  text: string;
  kind: 'identifier' | 'number' | 'date' | 'quote' | 'name';
  seq: number;
}

export interface CompactionRow {
  id: number;
  session_id: string;
  from_size: number;
  to_size: number;
  from_seq: number;
  to_seq: number;
  previous_summary: string | null;
  summary: string;
  trigger: CompactionTrigger;
  model: string;
  input_chars: number;
  summary_chars: number;
  /** Token usage of this compaction's summary call (0 when the model reported none). */
  input_tokens: number;
  output_tokens: number;
  created_at: string;
  /** Set when `POST /sessions/:id/compact/undo` reverted this compaction. */
  undone_at: string | null;
  /**
   * What the summary dropped (at most 50 items, a JSON array in the
   * database); null on compactions made before it was recorded.
   */
  dropped: DroppedItem[] | null;
}

export interface NewCompaction {
  sessionId: string;
  /** compact_size read before the model call; the write happens only if it is unchanged. */
  expectedSize: number;
  /** The session's epoch read before the model call; a reset in between makes the write fail. */
  expectedEpoch?: number;
  toSize: number;
  toSeq: number;
  summary: string;
  trigger: CompactionTrigger;
  model: string;
  inputChars: number;
  /** Token usage of the summary call (default 0: not reported). */
  inputTokens?: number;
  outputTokens?: number;
  /** What the new summary dropped of the folded messages (recorded as given). */
  dropped?: readonly DroppedItem[];
  /**
   * The task whose run compacts: nothing is written (SESSION_LOCK_LOST) unless
   * it is still this instance's running task, as for an append.
   */
  runningTask?: string;
}

export interface MemoryNote {
  agent_name: string;
  key: string;
  content: string;
  created_at: string;
  updated_at: string;
}

/** What compaction planning needs of a message: no content, so 100 000 of them stay small. */
export interface MessageMeta {
  seq: number;
  role: ChatMessage['role'];
  /** content length + Σ tool_calls (function name + arguments length). */
  chars: number;
  /** Ids of the tool calls an assistant message makes. */
  callIds?: string[];
  /** The call a tool message answers. */
  toolCallId?: string;
}

export interface DaemonState {
  agent_name: string;
  last_run_at: string | null;
  next_run_at: string | null;
  lease_owner: string | null;
  lease_expires: string | null;
}

export interface HistoryHit {
  seq: number;
  role: string;
  snippet: string;
}

/** What `forkSession` made, or what it found missing. */
export type ForkOutcome =
  | { kind: 'forked'; session: SessionRow }
  | { kind: 'no-session' }
  /** The session has no message with that seq (never had one, or a reset removed it). */
  | { kind: 'no-message' };

/** A Responses API answer as `GET /v1/responses/:id` returns it. */
export interface ResponseRow {
  /** `resp_…`, as the client received it. */
  id: string;
  session_id: string;
  /** Seq of the last message the response's turn stored: where a later turn naming it continues. */
  end_seq: number;
  /** The whole `response` object. */
  body: Record<string, unknown>;
  created_at: string;
}

/**
 * One word of a recall search: folded text; a `prefix` term matches any word
 * starting with it, another any word of the same Porter stem (stem.ts).
 */
export interface SearchTerm {
  text: string;
  prefix: boolean;
}

/** The span of time a question names: epoch milliseconds, `from` included, `to` excluded (UTC). */
export interface RecallPeriod {
  from: number;
  to: number;
}

/** A compacted message found by automatic recall, best match first. */
export interface RecallHit {
  seq: number;
  role: string;
  /** The message's text, at most RECALL_CONTENT_CHARS characters of it. */
  content: string;
  created_at: string;
  /**
   * How well it matches, higher is better (the store's rank: BM25 over the
   * session on SQLite, ts_rank on Postgres). Only its ratio to the best
   * hit's score of the same search means anything.
   */
  score: number;
}

/**
 * A recall hit must hold at least one word that fewer than this share of the
 * session's searched messages hold: a word most of the conversation repeats
 * (its topic, a speaker's name, chat filler) is no evidence that a message
 * answers the question, so a question of only such words recalls nothing.
 */
export const RECALL_EVIDENCE_SHARE = 0.25;
/** The evidence rule applies from this many searched messages: below, every word is rare and common at once. */
export const RECALL_EVIDENCE_MIN_MESSAGES = 40;

/**
 * Which of a search's words are evidence (RECALL_EVIDENCE_SHARE): word i,
 * held by `held[i]` of `searched` messages. All of them in a short session.
 */
export function evidenceWords(held: readonly number[], searched: number): boolean[] {
  if (searched < RECALL_EVIDENCE_MIN_MESSAGES) return held.map(() => true);
  return held.map((df) => df < RECALL_EVIDENCE_SHARE * searched);
}

/** How much of one message a recall search returns (a long tool output is clipped). */
export const RECALL_CONTENT_CHARS = 4_000;

/** Session rows: create, find, list, edit, reset, close, delete, fork. */
export interface SessionStore {
  createSession(input: NewSession): Promise<SessionRow>;
  findSession(id: string): Promise<SessionRow | undefined>;
  /**
   * The most recently updated open session of `agentName`, owned by `owner`
   * (key and end user alike), whose visible transcript hashes to `transcriptHash`.
   */
  findSessionByTranscript(
    agentName: string,
    transcriptHash: string,
    owner: Owner,
  ): Promise<SessionRow | undefined>;
  listSessions(filter: SessionFilter): Promise<Page<SessionRow>>;
  /** Deletes the messages, zeroes the token counts and clears every compaction column. */
  resetSession(id: string): Promise<SessionRow | undefined>;
  closeSession(id: string): Promise<SessionRow | undefined>;
  deleteSession(id: string): Promise<boolean>;
  /** Changes title and/or compact_count; undefined if there is no such session. */
  updateSession(id: string, edit: SessionEdit): Promise<SessionRow | undefined>;
  /** Import: writes `session` under a new id, owned by `owner`, with no messages yet; returns the id. */
  createImportedSession(session: ImportedSession, owner?: Owner): Promise<string>;
  /**
   * A new active `chat` session of the same agent (and owner) holding the
   * messages of `id` up to `atSeq` (default: its last message), seqs and
   * times kept. When `atSeq` is at or past the compaction pointer the
   * summary, the pointer and the compactions that built them come along;
   * before it, the fork has no summary and only raw messages. Token counts
   * start at zero. One transaction.
   */
  forkSession(id: string, atSeq?: number): Promise<ForkOutcome>;
}

/** Stored Responses API answers (`GET /v1/responses/:id`, branching by `previous_response_id`). */
export interface ResponseStore {
  /** Writes (or overwrites) one response; it goes when its session is deleted. */
  saveResponse(response: Omit<ResponseRow, 'created_at'>): Promise<void>;
  findResponse(id: string): Promise<ResponseRow | undefined>;
}

/** The chat front-ends whose conversations map to sessions (see `FrontEndChatStore`). */
export type FrontEndProtocol = 'ai-sdk' | 'ag-ui';

/** One front-end conversation: the chat id a front-end chose, scoped to who posts it and where. */
export interface FrontEndChat {
  protocol: FrontEndProtocol;
  /** The key and end user that posted it: the same chat id under another owner is another chat. */
  owner: Owner;
  agentName: string;
  /** The front-end's own id for the conversation (`useChat`'s `id`, AG-UI's `threadId`). */
  chatId: string;
}

/**
 * Which session holds each front-end chat. A mapping goes with its session;
 * sessions are exported without it (a chat id belongs to the front-end of
 * the server that made it, and an import makes a new session id anyway).
 */
export interface FrontEndChatStore {
  /** The id of the session `chat` is bound to, if any. */
  findFrontEndChat(chat: FrontEndChat): Promise<string | undefined>;
  /**
   * Binds `chat` to `sessionId` unless it is bound already, and returns the
   * session it is bound to: `sessionId`, or the one another request bound
   * first (two requests creating the same chat at once agree on one session).
   */
  bindFrontEndChat(chat: FrontEndChat, sessionId: string): Promise<string>;
  /**
   * Moves `chat` from session `fromSessionId` to `toSessionId` (a fork made
   * for a regenerate or an edit); false, changing nothing, when it is no
   * longer bound to `fromSessionId`.
   */
  rebindFrontEndChat(
    chat: FrontEndChat,
    fromSessionId: string,
    toSessionId: string,
  ): Promise<boolean>;
}

/** A chat's latest turn as `chat_streams` holds it (see `ChatStreamStore`). */
export interface ChatStreamState {
  streamId: string;
  /** The instance running (or that ran) the turn. */
  instanceId: string;
  ended: boolean;
  stopRequested: boolean;
  /** Whether that instance is this one or still heartbeats: a turn of a dead instance never ends by itself. */
  holderLive: boolean;
}

/** One batch of a turn's UI message chunks, as JSON text. */
export interface ChatStreamBatch {
  seq: number;
  chunks: string;
}

/**
 * The front-end chats' running turns, readable from every instance: the
 * running instance records its turn's chunks in batches and watches for a
 * stop; any instance finds a session's turn by the session's key, replays
 * its batches and follows it. Only a session's latest turn is kept.
 */
export interface ChatStreamStore {
  /** Records `streamId` as the session's running turn on `instanceId`; drops the previous turn's batches. */
  openChatStream(sessionId: string, streamId: string, instanceId: string): Promise<void>;
  /**
   * Appends a batch of the turn's chunks (none is fine) and, with `ended`,
   * marks the turn ended; returns whether a stop was asked for. Nothing
   * changes when the session's turn is no longer `streamId`.
   */
  writeChatStream(
    sessionId: string,
    streamId: string,
    batch: ChatStreamBatch | undefined,
    ended: boolean,
  ): Promise<{ stopRequested: boolean }>;
  /** The session's latest turn, with whether its holder lives (`self`, or a heartbeat within `staleAfterMs`). */
  findChatStream(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<ChatStreamState | undefined>;
  /** The turn's batches after `afterSeq`, in order. */
  readChatStream(sessionId: string, streamId: string, afterSeq: number): Promise<ChatStreamBatch[]>;
  /** Asks the session's turn to stop; false when it has ended or its holder is dead. */
  requestChatStop(
    sessionId: string,
    liveness: { self: string; staleAfterMs: number },
  ): Promise<boolean>;
}

/** The append-only message log of each session, and its full-text index. */
export interface MessageLog {
  /** Appends messages in order in one transaction; returns them as stored. */
  appendMessages(
    sessionId: string,
    messages: ChatMessage[],
    options?: AppendOptions,
  ): Promise<StoredMessage[]>;
  /**
   * `appendMessages` plus one `eventType` event per stored message (data:
   * seq, role, sessionId), committed in the same transaction; with the
   * session row as the append left it, where the store versions rows
   * (Postgres: a caller that keeps it needs no read before its next append).
   */
  appendMessagesWithEvents(
    sessionId: string,
    messages: ChatMessage[],
    eventType: string,
    options?: AppendOptions,
  ): Promise<AppendedWithEvents>;
  /** Page through a session's messages by seq (keyset, never OFFSET). */
  listMessages(
    sessionId: string,
    options: { afterSeq: number; limit: number },
  ): Promise<StoredMessage[]>;
  /** The system messages and the non-system messages after `afterSeq`: what a model call needs. */
  loadContext(
    sessionId: string,
    afterSeq: number,
  ): Promise<{ system: StoredMessage[]; tail: StoredMessage[] }>;
  /** Metadata of the non-system messages after `afterSeq`, in order, for compaction planning. */
  listMessageMeta(sessionId: string, afterSeq: number): Promise<MessageMeta[]>;
  /** The first `limit` non-system messages after `afterSeq`. */
  listTail(sessionId: string, afterSeq: number, limit: number): Promise<StoredMessage[]>;
  /**
   * The first user message of each of `sessionIds`, cut to `maxChars`: what a
   * list of sessions shows for an untitled one. One look-up on the (session,
   * seq) index per session, never the history; a session without a user
   * message is absent from the map.
   */
  firstUserMessages(sessionIds: readonly string[], maxChars: number): Promise<Map<string, string>>;
  /** Full-text search over every raw message of a session, compacted ones included. */
  searchHistory(sessionId: string, query: string, limit: number): Promise<HistoryHit[]>;
  /**
   * The session's non-system messages with seq ≤ `maxSeq` (the compacted
   * ones) that contain any of `terms`, and the messages around the best of
   * them, best ranked first in context (recall-rank.ts; a message written
   * within `period` counts more), at most `limit`. Bounded reads: the
   * full-text index, then the rows by id and by (session, seq). No terms, no
   * hits.
   */
  recallMessages(
    sessionId: string,
    terms: readonly SearchTerm[],
    maxSeq: number,
    limit: number,
    period?: RecallPeriod,
  ): Promise<RecallHit[]>;
  /**
   * `terms` with each misspelled word corrected to the word the history
   * holds (store/vocabulary.ts): a letters-only word of five letters or more
   * whose stem no message at or below `maxSeq`'s mark holds becomes the
   * stored word one edit away (two for a long word) that many messages hold;
   * one whose stem only one message holds is kept, and that word is added
   * after `terms` (it may be no typo). Other terms are returned as they are,
   * in order, first.
   */
  correctRecallTerms(
    sessionId: string,
    terms: readonly SearchTerm[],
    maxSeq: number,
  ): Promise<SearchTerm[]>;
  /** Import: appends messages keeping their seq (increasing, after the last one) and time. */
  appendImportedMessages(sessionId: string, messages: readonly ImportedMessage[]): Promise<void>;
}

/** A message's embedding, as exported and imported: which model made it, and how many dimensions. */
export interface MessageVector {
  seq: number;
  model: string;
  dimensions: number;
  /** Unit length (normalised when written), `dimensions` long. */
  vector: Float32Array;
}

/** A message that has text and no vector of the current model and dimensions yet. */
export interface UnembeddedMessage {
  /** The message's row id: the backlog walks the table in this order. */
  id: number;
  session_id: string;
  /** The session's owner key (null: the admin's): whose day its embedding is held against. */
  owner_key: string | null;
  seq: number;
  content: string;
}

/** A vector as recall loads it into memory: `id` grows with every vector written. */
export interface LoadedVector {
  id: number;
  seq: number;
  vector: Float32Array;
}

/** A vector to write for a stored message. */
export interface NewMessageVector {
  messageId: number;
  model: string;
  dimensions: number;
  vector: Float32Array;
}

/**
 * Message embeddings (hybrid recall): one vector per message, the model and
 * dimensions that made it beside it, dropped with its message. Plain columns
 * (a BLOB, a bytea) holding little-endian float32s.
 */
export interface VectorStore {
  /**
   * Non-system messages with text, `id > afterId`, in id order, that have no
   * vector made by `model` with `dimensions`: what the background embedder does next.
   * `dimensions` -1 (a role that sets none, before its first answer): any
   * vector of `model` counts, so a restart does not embed its first batch again.
   */
  unembeddedMessages(
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<UnembeddedMessage[]>;
  /**
   * Writes the vectors (replacing a message's older one) and charges each
   * session's owner key `tokens` as a model call would, in one transaction;
   * vectors of messages deleted meanwhile are skipped.
   */
  saveVectors(
    vectors: readonly NewMessageVector[],
    charges: readonly { sessionId: string; tokens: number }[],
  ): Promise<void>;
  /** The session's vectors of `model` and `dimensions` with `id > afterId`, in id order, at most `limit`. */
  loadVectors(
    sessionId: string,
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<LoadedVector[]>;
  /** Export: the session's vectors with seq > `afterSeq`, in seq order, at most `limit`. */
  listVectors(sessionId: string, afterSeq: number, limit: number): Promise<MessageVector[]>;
  /** Import: vectors for the session's messages of those seqs (a seq with no message is skipped). */
  appendImportedVectors(sessionId: string, vectors: readonly MessageVector[]): Promise<void>;
  /** The session's compacted non-system messages (seq ≤ `maxSeq`) of `seqs`, in no order. */
  messagesAtSeqs(sessionId: string, seqs: readonly number[], maxSeq: number): Promise<RecallHit[]>;
}

/** Compaction rows and the compaction columns of a session. */
export interface CompactionStore {
  /** Compare-and-set: applies only where compact_size still equals expectedSize. */
  commitCompaction(input: NewCompaction): Promise<SessionRow | undefined>;
  /** Restores the state before the latest compaction if it is still the latest; undefined on conflict. */
  undoCompaction(
    sessionId: string,
  ): Promise<{ session: SessionRow; restoredSize: number } | undefined>;
  listCompactions(sessionId: string): Promise<CompactionRow[]>;
  setCompactionSuspended(sessionId: string, suspended: boolean): Promise<void>;
  /** Import: appends compaction rows as an export carries them. */
  appendImportedCompactions(
    sessionId: string,
    compactions: readonly ImportedCompaction[],
  ): Promise<void>;
}

/**
 * A session's next summary, prepared off the turn: claimed by one instance
 * (`summary` null while it is computed), then ready for the next turn to land.
 */
export interface PreparedCompactionRow {
  session_id: string;
  /** The instance computing (or that computed) the summary. */
  holder: string;
  /** The pointer the summary was computed for: it lands only where the session still has it. */
  expected_size: number;
  expected_epoch: number;
  claimed_at: string;
  /** Messages the summary folds; null until it is ready. */
  messages: number | null;
  to_size: number | null;
  to_seq: number | null;
  summary: string | null;
  model: string | null;
  input_chars: number | null;
  input_tokens: number | null;
  output_tokens: number | null;
  dropped: DroppedItem[] | null;
  ready_at: string | null;
}

export interface PreparationClaim {
  sessionId: string;
  holder: string;
  expectedSize: number;
  expectedEpoch: number;
  /** A holder whose heartbeat is older than this is gone: its claim may be taken over. */
  staleAfterMs: number;
}

export interface PreparedSummary {
  sessionId: string;
  holder: string;
  expectedSize: number;
  expectedEpoch: number;
  messages: number;
  toSize: number;
  toSeq: number;
  summary: string;
  model: string;
  inputChars: number;
  inputTokens: number;
  outputTokens: number;
  dropped: readonly DroppedItem[];
}

/**
 * Summaries prepared in the background, one per session, claimed across
 * instances: a claim is taken when there is none, when its holder is not a
 * live instance (no `instances` row with a heartbeat within `staleAfterMs`;
 * never `holder` itself), or when it was made for another pointer.
 */
export interface PreparedCompactionStore {
  /** Takes the session's preparation for `holder`; false when a live holder has it for this pointer. */
  claimPreparation(claim: PreparationClaim): Promise<boolean>;
  /** Stores the prepared summary; false (nothing stored) unless `holder` still holds the claim for that pointer. */
  finishPreparation(prepared: PreparedSummary): Promise<boolean>;
  findPreparation(sessionId: string): Promise<PreparedCompactionRow | undefined>;
  /** Removes the session's preparation (landed, stale or failed); with `holder`, only that holder's. */
  dropPreparation(sessionId: string, holder?: string): Promise<void>;
}

/** Events after `afterId`, oldest first; with `ownerKey`, only the events of that client key's sessions. */
export interface EventFilter {
  afterId: number;
  sessionId?: string;
  ownerKey?: string;
  limit: number;
}

/** The event log that `GET /events` pages through. */
export interface EventLog {
  appendEvent(event: NewEvent): Promise<EventRow>;
  listEvents(options: EventFilter): Promise<EventRow[]>;
}

export interface NewTask {
  sessionId: string;
  agentName: string;
  input: string;
}

export interface TaskFilter {
  status?: TaskStatus;
  agentName?: string;
  /** Only the tasks of this session (an A2A context). */
  sessionId?: string;
  ownerKey?: string;
  limit: number;
  cursor?: string;
}

/** The patch `transitionTask` applies: the columns a transition may set. */
export type TaskPatch = Partial<
  Pick<
    TaskRow,
    | 'status'
    | 'result'
    | 'question'
    | 'error'
    | 'pending_call_id'
    | 'pending_tool'
    | 'pending_arguments'
    | 'approval_expires_at'
    | 'decided_by'
  >
>;

/** Task rows and their status transitions. */
export interface TaskStore {
  /** The task gets its session's owner key and end user. */
  createTask(input: NewTask): Promise<TaskRow>;
  findTask(id: string): Promise<TaskRow | undefined>;
  listTasks(filter: TaskFilter): Promise<Page<TaskRow>>;
  /**
   * Updates a task only if its status is one of `from`; returns undefined when
   * it was not. A `running` task moves on only by its owner (this store's
   * instance, or none recorded): a run that outlived being declared dead
   * cannot settle a task a peer has resumed since.
   */
  transitionTask(
    id: string,
    from: readonly TaskStatus[],
    patch: TaskPatch,
  ): Promise<TaskRow | undefined>;
  findWaitingTaskForSession(sessionId: string): Promise<TaskRow | undefined>;
  /**
   * The session and the task waiting on it, read at once: what a turn checks
   * once it holds the session (one round trip on Postgres, not two).
   */
  findSessionWithWaitingTask(
    sessionId: string,
  ): Promise<{ session: SessionRow | undefined; waitingTask: TaskRow | undefined }>;
  /**
   * Marks `running` tasks `interrupted` (after a crash or shutdown); returns how
   * many. With `ownerInstance`, only the tasks that instance runs (one instance
   * shutting down beside live peers).
   */
  interruptRunningTasks(ownerInstance?: string): Promise<number>;
}

/** Whose work a sweep may take over: not `self`'s, and only an owner with no heartbeat within `staleAfterMs`. */
export interface OrphanScope {
  self: string;
  staleAfterMs: number;
}

/**
 * The instances that share the database: each records itself and
 * heartbeats; a store opened with an instance id writes it as the owner of
 * every task it sets `running`.
 */
export interface InstanceStore {
  /** Records that `instanceId` is alive now (creating its row the first time). */
  heartbeatInstance(instanceId: string): Promise<void>;
  /** Removes the instance's row (a clean shutdown: nothing of it runs any more). */
  removeInstance(instanceId: string): Promise<void>;
  /**
   * Marks `interrupted` the running tasks whose owner is gone: no owner, no
   * instance row, or a heartbeat older than `staleAfterMs`. Never those of
   * `self`. Returns how many.
   */
  interruptOrphanedTasks(scope: OrphanScope): Promise<number>;
  /**
   * Frees daemon leases whose holder is not a live instance (same test as
   * `interruptOrphanedTasks`; a lease holder is an instance id), so a daemon
   * whose tick died with its instance ticks again within seconds, not after
   * the lease's length. Returns how many.
   */
  releaseOrphanedDaemonLeases(scope: OrphanScope): Promise<number>;
  /**
   * Closes the `daemon` sessions of ticks that died with their instance: an
   * active daemon session whose running task, or whose agent's daemon lease,
   * belongs to an owner that is not a live instance (same test as
   * `interruptOrphanedTasks`). A live peer's tick, and self's, stay open.
   * Call it before `interruptOrphanedTasks` and `releaseOrphanedDaemonLeases`,
   * which erase what it recognises a dead tick by. Returns how many.
   */
  closeOrphanedDaemonSessions(scope: OrphanScope): Promise<number>;
}

/** Daemon schedule state and the per-agent tick lease. */
export interface DaemonLeaseStore {
  findDaemonState(agentName: string): Promise<DaemonState | undefined>;
  /**
   * Takes the agent's tick lease if it is free or expired; false when another
   * holder has it. One tick of an agent runs at a time, across processes.
   * With `onlyIfDue`, also false unless the stored next run is due by `now`
   * (or unset): a scheduled slot that a peer instance already ran is not run again.
   */
  claimDaemonLease(
    agentName: string,
    owner: string,
    now: Date,
    leaseMs: number,
    onlyIfDue?: boolean,
  ): Promise<boolean>;
  /** Records a finished tick and releases the lease; ignored unless `owner` still holds it. */
  finishDaemonRun(
    agentName: string,
    owner: string,
    lastRunAt: Date,
    nextRunAt: Date | null,
  ): Promise<boolean>;
  /** Frees every daemon lease (at start-up, when their holders are known dead); returns how many. */
  releaseDaemonLeases(): Promise<number>;
  /** Records when the next tick is due (at start-up and after schedule changes). */
  setDaemonNextRun(agentName: string, nextRunAt: Date | null): Promise<void>;
}

/** Agent memory notes. */
export interface MemoryStore {
  /** The newest notes, or the best full-text matches of `query`; at most `limit` (default 100). */
  listMemory(agentName: string, query?: string, limit?: number): Promise<MemoryNote[]>;
  putMemory(
    agentName: string,
    key: string,
    content: string,
    options?: MemoryWriteOptions,
  ): Promise<MemoryNote>;
  deleteMemory(agentName: string, key: string, options?: MemoryWriteOptions): Promise<boolean>;
}

export interface MemoryWriteOptions {
  /** The task whose run writes (the memory tool): refused, as an append is, once it was taken over. */
  runningTask?: string;
}

/** Which agents a client key may use: every one, or these names. */
export type KeyAgents = '*' | string[];

export interface KeyLimits {
  requestsPerMinute?: number;
  tokensPerDay?: number;
  /** Open event streams and streamed responses at once, per instance (default ¾ of server.maxStreams). */
  maxStreams?: number;
  /** Session imports read or waiting at once, per instance (default 1). */
  maxImports?: number;
  /** Requests that run a model at once, per instance (no default share). */
  maxTurns?: number;
}

/** A client key as the API shows it (never its secret or the secret's hash). */
export interface KeyRow {
  id: string;
  name: string;
  agents: KeyAgents;
  limits: KeyLimits;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

/**
 * What a key has spent: `cost` sums the cost of the sessions it owns (a
 * deleted session no longer counts), `tokens` its token usage on one UTC day.
 */
export interface KeySpend {
  cost: number;
  tokens: number;
}

export interface NewKey {
  name: string;
  agents: KeyAgents;
  limits: KeyLimits;
  /** SHA-256 of the secret, hex; the secret itself is never stored. */
  secretHash: string;
}

/**
 * Client keys and what they spent. Tokens are counted by the stores
 * themselves: every append with usage, and every compaction, on a session
 * with an owner key adds to that key's row for the UTC day.
 */
export interface KeyStore {
  createKey(input: NewKey): Promise<KeyRow>;
  findKey(id: string): Promise<KeyRow | undefined>;
  /** The unrevoked key whose secret hashes to `secretHash` (hex), with that hash. */
  findKeyBySecretHash(secretHash: string): Promise<(KeyRow & { secret_hash: string }) | undefined>;
  /** Every key, revoked ones too, newest first. */
  listKeys(): Promise<KeyRow[]>;
  /** Revokes the key (once: a second revoke keeps the first time); undefined if there is none. */
  revokeKey(id: string): Promise<KeyRow | undefined>;
  /** Replaces the key's limits (its secret stays); undefined if there is none. */
  setKeyLimits(id: string, limits: KeyLimits): Promise<KeyRow | undefined>;
  /** Records that the key was used at `at` (callers batch this: not once per request). */
  touchKey(id: string, at: string): Promise<void>;
  /** Tokens the key's sessions spent on `day` (YYYY-MM-DD, UTC). */
  keyTokensOn(keyId: string, day: string): Promise<number>;
  /** What the key has spent, its tokens those of `day`; zeros for a key with no sessions. */
  keySpend(keyId: string, day: string): Promise<KeySpend>;
  /** What every key has spent, by key id, in one grouped query (not one query per key). */
  listKeySpend(day: string): Promise<Map<string, KeySpend>>;
  /**
   * Checks the key's `tokensPerDay` against its usage of `day` plus the
   * reservations of live holders, and reserves `tokens` when they fit, in one
   * atomic step against every other reserver on the database. A key with no
   * such limit reserves nothing (`max` undefined); an unknown key neither.
   */
  reserveKeyTokens(input: TokenReservationInput): Promise<TokenReservationResult>;
  /** Sets a reservation to the tokens its call really used (until it is released). */
  settleReservation(id: string, tokens: number): Promise<void>;
  /** Ends a reservation: its usage was charged with the write that recorded it, or the call failed. */
  releaseReservation(id: string): Promise<void>;
  /** Charges `tokens` to the reservation's key and day and ends it, in one step (for usage no other write charges). */
  chargeReservation(id: string, tokens: number): Promise<void>;
}

export interface TokenReservationInput {
  id: string;
  keyId: string;
  /** The UTC day (YYYY-MM-DD) the tokens count on. */
  day: string;
  tokens: number;
  /** Who holds it, and how old a heartbeat may be for its holder to count as live. */
  holder: OrphanScope;
}

export interface TokenReservationResult {
  /** The key's name, for the refusal's message; undefined for an unknown key. */
  keyName?: string;
  /** The key's tokensPerDay; undefined when it has none (nothing was reserved). */
  max?: number;
  /** Tokens charged on the day, and held by live reservations, before this one. */
  spent: number;
  held: number;
  reserved: boolean;
}

/** What a model call was for: the turn's calls, a compaction's summary, a session title. */
export type ModelCallRole = 'main' | 'compact' | 'title' | 'embed';

/** A model call as listed (GET /sessions/:id/calls): everything but the request it sent. */
export interface ModelCallSummary {
  id: string;
  session_id: string;
  /** Seq of the first message of the turn the call served; null outside a turn. */
  turn_seq: number | null;
  role: ModelCallRole;
  provider: string;
  /** The model asked for. */
  model: string;
  /** The model that answered, as the provider named it. */
  response_model: string | null;
  created_at: string;
  latency_ms: number;
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  /** By the role's pricing; null when the role has none or the provider reported no usage. */
  cost: number | null;
  finish_reason: string | null;
  /** What came back; null when the call failed. */
  response: { content: string | null; tool_calls?: ToolCall[] } | null;
  error: { code: string; message: string } | null;
  fallback_hops: FallbackHop[] | null;
  recalled_seqs: number[] | null;
}

/** One model call with the request it sent (GET /calls/:id). */
export interface ModelCallRecord extends ModelCallSummary {
  /**
   * The request body exactly as sent: `JSON.stringify(request)` is the bytes
   * the provider received. When the provider did not report its body
   * (`wire: false`), Cairn's own request (messages, tools, parameters).
   */
  request: Record<string, unknown>;
  wire: boolean;
}

/** A message (or parameter set) of a recorded request, stored once per session. */
export interface CallBlob {
  hash: string;
  body: string;
}

/** A call to record: the summary's fields plus its request as refs (see migration 010). */
export interface NewModelCall extends ModelCallSummary {
  wire: boolean;
  params_ref: string;
  chain_id: string;
  base_call_id: string | null;
  base_keep: number;
  message_refs: readonly string[];
  /** Blobs this call refers to that may not be stored yet (written if missing). */
  blobs: readonly CallBlob[];
}

export interface ModelCallFilter {
  role?: ModelCallRole;
  limit: number;
  cursor?: string;
}

/** The model-call records and the cost each session sums. */
export interface CallRecordStore {
  /**
   * Writes the calls, their missing blobs and their cost (added to the
   * session's) in one transaction; calls of a session deleted meanwhile are skipped.
   */
  appendModelCalls(calls: readonly NewModelCall[]): Promise<void>;
  /** Adds to a session's cost without a record (records turned off). */
  addSessionCost(sessionId: string, cost: number): Promise<void>;
  /** A keyset page of the session's calls, newest first. */
  listModelCalls(sessionId: string, filter: ModelCallFilter): Promise<Page<ModelCallSummary>>;
  /** The call with its request rebuilt from its chain. */
  findModelCall(id: string): Promise<ModelCallRecord | undefined>;
  /**
   * Deletes up to `maxChains` chains whose newest call is older than
   * `before`, and the blobs of sessions left with no call; returns how many
   * calls went. One short transaction.
   */
  pruneModelCalls(before: string, maxChains: number): Promise<number>;
}

/**
 * Everything a dialect implements: the composition root holds one `Store`
 * and hands each consumer only the parts it uses. Import (POST /sessions/import)
 * writes a session row, then its messages and compactions in batches, through
 * the import methods of the three parts.
 */
export interface Store
  extends
    SessionStore,
    MessageLog,
    CompactionStore,
    PreparedCompactionStore,
    EventLog,
    TaskStore,
    DaemonLeaseStore,
    MemoryStore,
    InstanceStore,
    ResponseStore,
    FrontEndChatStore,
    ChatStreamStore,
    CallRecordStore,
    VectorStore,
    KeyStore {
  readonly kind: 'sqlite' | 'postgres';
  /** Answers once the database answers a trivial query; rejects when it cannot be reached. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
