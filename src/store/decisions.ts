/**
 * The decisions both dialects make the same way, as pure functions: whether a
 * compaction (or its undo) still applies and the row it writes, the rows of an
 * append or import with the visible-transcript chain advanced over them, the
 * counters an append adds to its session, and the newest-first keyset page
 * (its filter and its assembly). Each dialect keeps only its SQL and its way
 * of running it; nothing here touches a database.
 */
import { messageChars, type ChatMessage } from '../llm/messages.js';
import { TASK_PATCH_COLUMNS, decodeCursor, encodeCursor, type MessageRecord } from './records.js';
import { isVisible, nextTranscriptHash } from './transcript-hash.js';
import { ADMIN_OWNER } from './store.js';
import type {
  AppendOptions,
  CompactionRow,
  DroppedItem,
  EventRow,
  ImportedMessage,
  NewCompaction,
  NewEvent,
  NewSession,
  Page,
  PreparedCompactionRow,
  PreparedSummary,
  SessionFilter,
  SessionRow,
  TaskFilter,
  TaskPatch,
} from './store.js';

// ---- compaction -------------------------------------------------------------

/**
 * The compare-and-set precondition of a compaction: the session is still at
 * the size (and, when given, the epoch) read before the model call.
 */
export function compactionApplies(
  before: SessionRow | undefined,
  input: NewCompaction,
): before is SessionRow {
  if (before === undefined || before.compact_size !== input.expectedSize) return false;
  return input.expectedEpoch === undefined || before.epoch === input.expectedEpoch;
}

/** The latest compaction can be undone: there is one and it is not undone yet. */
export function undoApplies<Row extends Pick<CompactionRow, 'undone_at'>>(
  latest: Row | undefined,
): latest is Row {
  return latest !== undefined && latest.undone_at === null;
}

/**
 * A `compactions` row as written (a commit or an import), in
 * COMPACTION_COLUMNS order: `dropped` as its JSON text.
 */
export type CompactionRecord = Omit<CompactionRow, 'id' | 'dropped'> & { dropped: string | null };

/** A `compactions` row as the database returns it (`dropped` still JSON text). */
export type StoredCompactionRow = Omit<CompactionRow, 'dropped'> & { dropped: string | null };

/** The JSON text `dropped` is stored as; null stays null (a record made before it was kept). */
export function droppedText(dropped: readonly DroppedItem[] | null | undefined): string | null {
  return dropped === null || dropped === undefined ? null : JSON.stringify(dropped);
}

/** A stored row as the store returns it: `dropped` parsed. */
export function compactionFromRow(row: StoredCompactionRow): CompactionRow {
  return {
    ...row,
    dropped: row.dropped === null ? null : (JSON.parse(row.dropped) as DroppedItem[]),
  };
}

/** A `prepared_compactions` row as the database returns it (`dropped` still JSON text). */
export type StoredPreparationRow = Omit<PreparedCompactionRow, 'dropped'> & {
  dropped: string | null;
};

export function preparationFromRow(row: StoredPreparationRow): PreparedCompactionRow {
  return {
    ...row,
    // Postgres returns BIGINT columns as strings.
    input_tokens: row.input_tokens === null ? null : Number(row.input_tokens),
    output_tokens: row.output_tokens === null ? null : Number(row.output_tokens),
    dropped: row.dropped === null ? null : (JSON.parse(row.dropped) as DroppedItem[]),
  };
}

/** A prepared summary's values in the order of PREPARED_COLUMNS, after session, holder and pointer. */
export function preparedValues(prepared: PreparedSummary, readyAt: string): unknown[] {
  return [
    prepared.messages,
    prepared.toSize,
    prepared.toSeq,
    prepared.summary,
    prepared.model,
    prepared.inputChars,
    prepared.inputTokens,
    prepared.outputTokens,
    droppedText(prepared.dropped),
    readyAt,
  ];
}

/** The columns a finished preparation sets, in `preparedValues` order. */
export const PREPARED_COLUMNS = [
  'messages',
  'to_size',
  'to_seq',
  'summary',
  'model',
  'input_chars',
  'input_tokens',
  'output_tokens',
  'dropped',
  'ready_at',
] as const;

export const COMPACTION_COLUMNS = [
  'session_id',
  'from_size',
  'to_size',
  'from_seq',
  'to_seq',
  'previous_summary',
  'summary',
  'trigger',
  'model',
  'input_chars',
  'summary_chars',
  'input_tokens',
  'output_tokens',
  'created_at',
  'undone_at',
  'dropped',
] as const satisfies readonly (keyof CompactionRecord)[];

/** The history row of a compaction moving the pointer from `before`'s to the input's. */
export function compactionRecord(
  input: NewCompaction,
  before: SessionRow,
  createdAt: string,
): CompactionRecord {
  return {
    session_id: input.sessionId,
    from_size: before.compact_size,
    to_size: input.toSize,
    from_seq: before.compact_seq,
    to_seq: input.toSeq,
    previous_summary: before.compact_summary,
    summary: input.summary,
    trigger: input.trigger,
    model: input.model,
    input_chars: input.inputChars,
    summary_chars: input.summary.length,
    input_tokens: input.inputTokens ?? 0,
    output_tokens: input.outputTokens ?? 0,
    created_at: createdAt,
    undone_at: null,
    dropped: droppedText(input.dropped ?? null),
  };
}

// ---- messages ---------------------------------------------------------------

/** A `messages` row as an append or an import writes it. */
export interface MessageInsert extends MessageRecord {
  tokens: number;
  chars: number;
  /** The chain hash after this message; null when it is not visible. */
  transcript_hash: string | null;
  /**
   * A tool message: the seq of the assistant message whose call it answers,
   * so the store holds one result per call of a message (migration 015);
   * `ANSWERS_NEWEST_ASSISTANT` when that message was written before this
   * batch (the insert looks it up); null when unconstrained.
   */
  answers_seq: number | null;
}

/** `answers_seq` of a result whose assistant message is already stored: the insert finds its seq. */
export const ANSWERS_NEWEST_ASSISTANT = -1;

/**
 * How tool results are tied to their assistant message: an append ties every
 * one (a second result for a call is refused); an import copies a history as
 * it was written, so a duplicate it carries (or a result whose call is in an
 * earlier batch) is left unconstrained rather than failing the import.
 */
export type ResultBinding = 'append' | 'import';

/** Appended messages numbered after `lastSeq`, all stamped `createdAt`. */
export function numberMessages(
  messages: readonly ChatMessage[],
  lastSeq: number,
  createdAt: string,
): ImportedMessage[] {
  return messages.map((message, i) => ({
    ...message,
    seq: lastSeq + i + 1,
    created_at: createdAt,
  }));
}

/**
 * The rows of `messages` in order, with the visible-transcript chain advanced
 * from `transcript` (the session's head) over them. The chain advances at
 * write time, so matching a transcript never scans messages. `tokens` are the
 * messages' estimates, computed before the transaction.
 */
export function chainMessages(
  sessionId: string,
  messages: readonly ImportedMessage[],
  tokens: readonly number[],
  transcript: string | null,
  binding: ResultBinding,
): { rows: MessageInsert[]; transcript: string | null } {
  let head = transcript;
  let assistantSeq: number | undefined;
  const bound = new Set<string>();
  const answers = (message: ImportedMessage): number | null => {
    if (message.role === 'assistant') assistantSeq = message.seq;
    if (message.role !== 'tool') return null;
    if (assistantSeq === undefined) return binding === 'append' ? ANSWERS_NEWEST_ASSISTANT : null;
    const key = `${assistantSeq}\u0000${message.tool_call_id ?? ''}`;
    if (binding === 'import' && bound.has(key)) return null;
    bound.add(key);
    return assistantSeq;
  };
  const rows = messages.map((message, i): MessageInsert => {
    const visible = isVisible(message);
    if (visible) head = nextTranscriptHash(head, message);
    return {
      answers_seq: answers(message),
      session_id: sessionId,
      seq: message.seq,
      role: message.role,
      content: message.content,
      tool_calls: message.tool_calls?.length ? JSON.stringify(message.tool_calls) : null,
      tool_call_id: message.tool_call_id ?? null,
      name: message.name ?? null,
      created_at: message.created_at,
      tokens: tokens[i]!,
      chars: messageChars(message),
      transcript_hash: visible ? head : null,
    };
  });
  return { rows, transcript: head };
}

/** What an append adds to its session row, and the tokens it charges to the owner key. */
export function appendCounters(options: AppendOptions, count: number, lastSeq: number) {
  const usage = options.usage;
  return {
    count,
    last_seq: lastSeq,
    input_tokens: usage?.input_tokens ?? 0,
    output_tokens: usage?.output_tokens ?? 0,
    cache_read_tokens: usage?.cache_read_tokens ?? 0,
    cache_write_tokens: usage?.cache_write_tokens ?? 0,
    prompt_tokens: options.promptTokens ?? null,
    // The reported prompt covered everything before the reply just stored.
    prompt_seq: lastSeq - count,
    charged: usage ? usage.input_tokens + usage.output_tokens : 0,
  };
}

/** The event an append with events writes for one stored message. */
export function messageEvent(
  type: string,
  sessionId: string,
  message: { seq: number; role: string },
): NewEvent {
  return { type, sessionId, data: { seq: message.seq, role: message.role, sessionId } };
}

/** The event as stored under `id`. */
export function storedEvent(id: number, event: NewEvent, createdAt: string): EventRow {
  return {
    id,
    type: event.type,
    session_id: event.sessionId ?? null,
    data: event.data,
    created_at: createdAt,
  };
}

// ---- sessions ---------------------------------------------------------------

/** Where a new session's owner and transcript chain start. */
export function sessionOrigin(input: Pick<NewSession, 'owner' | 'transcriptSeed'>) {
  const owner = input.owner ?? ADMIN_OWNER;
  return {
    owner_key: owner.key,
    end_user: owner.user,
    transcript_hash: input.transcriptSeed ?? null,
  };
}

/** The equality filters of a session listing, by column. */
export function sessionFilterColumns(filter: SessionFilter): Record<string, string | undefined> {
  return {
    agent_name: filter.agentName,
    status: filter.status,
    mode: filter.mode,
    parent_session_id: filter.parentSessionId,
    owner_key: filter.ownerKey,
    end_user: filter.endUser,
  };
}

/** The equality filters of a task listing, by column. */
export function taskFilterColumns(filter: TaskFilter): Record<string, string | undefined> {
  return {
    status: filter.status,
    agent_name: filter.agentName,
    session_id: filter.sessionId,
    owner_key: filter.ownerKey,
  };
}

/** The columns of `patch` a transition may set, in the patch's order (anything else is ignored). */
export function taskPatchColumns(patch: TaskPatch): string[] {
  return Object.keys(patch).filter((key) => TASK_PATCH_COLUMNS.includes(key));
}

// ---- keyset pages -----------------------------------------------------------

/**
 * A keyset page newest first by (created_at, id): `select` with equality
 * filters on the given columns (undefined ones are ignored) and the cursor's
 * bound, one row more than the page so the page knows whether another follows.
 * Never OFFSET. `param` writes the dialect's placeholder for the n-th parameter.
 */
export function newestFirstQuery(
  select: string,
  equals: Record<string, string | undefined>,
  page: { limit: number; cursor?: string },
  param: (position: number) => string,
): { sql: string; params: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  const bind = (value: unknown): string => param(params.push(value));
  for (const [column, value] of Object.entries(equals)) {
    if (value !== undefined) where.push(`${column} = ${bind(value)}`);
  }
  if (page.cursor !== undefined) {
    const [createdAt, id] = decodeCursor(page.cursor);
    where.push(
      `(created_at < ${bind(createdAt)} OR (created_at = ${bind(createdAt)} AND id < ${bind(id)}))`,
    );
  }
  const filter = where.length ? ` WHERE ${where.join(' AND ')}` : '';
  const sql = `${select}${filter} ORDER BY created_at DESC, id DESC LIMIT ${bind(page.limit + 1)}`;
  return { sql, params };
}

/** The page of rows read by `newestFirstQuery` (one more than `limit` means another page follows). */
export function newestFirstPage<R extends { created_at: string; id: string }>(
  rows: readonly R[],
  limit: number,
): Page<R> {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  const more = rows.length > limit && last !== undefined;
  return { items, nextCursor: more ? encodeCursor(last.created_at, last.id) : null };
}
