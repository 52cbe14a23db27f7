/**
 * An append to a session's message log on Postgres, as one statement: the
 * session row's counters, the message rows, the owner key's usage and the
 * `message.created` events are written by data-modifying CTEs of a single
 * INSERT … SELECT chain, so an append outside a transaction is one round
 * trip and one commit.
 *
 * The rows are computed before the statement from the session's head (its
 * last seq and visible-transcript hash), and the statement writes only if
 * the row still has that head — a compare-and-set on the UPDATE, re-checked
 * by Postgres on the newest row version when a concurrent writer got there
 * first. Every other CTE reads the UPDATE's output, so a moved head writes
 * nothing at all. The caller then locks the row and appends again; a head
 * that matches gives exactly the rows the locked path computes, since the
 * rows are a function of the head alone.
 *
 * Event ids are handed out after the events advisory lock is held, in the
 * same statement: the INSERT into events reads its rows through the CTE
 * that takes the lock, so no row (and no identity value) exists before the
 * lock is granted. The lock is held to the commit, as it always was, so ids
 * still become visible in id order and a reader paging by id never skips
 * one that commits late.
 */
import type { ChatMessage, StoredMessage } from '../../llm/messages.js';
import type * as store from '../store.js';
import * as decide from '../decisions.js';
import * as records from '../records.js';
import { chargeOwnersSql } from './pg-keys.js';
import type { Queryable } from './open-pool.js';
import { prepared } from './prepared.js';
import { modelCallsJson } from './pg-call-records.js';
import { MODEL_CALL_INSERT_COLUMNS } from '../model-call-rows.js';

/** Serialises event inserts (see the module comment). */
export const EVENTS_LOCK_KEY = 0x636169726e02;

/** How many sessions' heads a store remembers; a forgotten head costs one locked append. */
export const SESSION_HEADS_MAX = 10_000;

/** Where a session's log ends: what the rows of its next append are computed from. */
export interface SessionHead {
  last_seq: number;
  transcript_hash: string | null;
}

/**
 * The head this store last saw for each session. Only a hint: an append
 * that finds the row moved writes nothing and takes the locked path.
 */
export class SessionHeads {
  private readonly heads = new Map<string, SessionHead>();

  constructor(private readonly max = SESSION_HEADS_MAX) {}

  get(sessionId: string): SessionHead | undefined {
    return this.heads.get(sessionId);
  }

  /** Notes the head of a session row as read or written; returns the row. */
  note<R extends SessionHead & { id: string }>(row: R): R;
  note<R extends SessionHead & { id: string }>(row: R | undefined): R | undefined;
  note<R extends SessionHead & { id: string }>(row: R | undefined): R | undefined {
    if (row !== undefined) this.set(row.id, row);
    return row;
  }

  set(sessionId: string, head: SessionHead): void {
    // Re-inserted, so the oldest entry is the least recently written.
    this.heads.delete(sessionId);
    this.heads.set(sessionId, { last_seq: head.last_seq, transcript_hash: head.transcript_hash });
    if (this.heads.size > this.max) this.heads.delete(this.heads.keys().next().value!);
  }

  forget(sessionId: string): void {
    this.heads.delete(sessionId);
  }
}

/** One append as the statement writes it. */
export interface AppendWrite {
  sessionId: string;
  messages: ChatMessage[];
  tokens: readonly number[];
  options: store.AppendOptions;
  createdAt: string;
  /** Write a `message.created`-style event of this type per message; none when undefined. */
  eventType?: string;
}

export interface Appended {
  messages: StoredMessage[];
  events: store.EventRow[];
  /** The session's head after the append. */
  head: SessionHead;
  /** The session row after the append, with its version (the row's `xmin`). */
  session: store.VersionedSession;
}

/**
 * Postgres text cannot hold U+0000, which SQLite stores as is (a tool may
 * return it from a binary file): it is written as U+FFFD instead of failing
 * the whole turn. JSON columns are unaffected (JSON escapes it).
 */
export function pgText<T extends string | null>(value: T): T {
  return (value === null ? value : value.replaceAll('\u0000', '\uFFFD')) as T;
}

/** The columns of a message row, each with the type of its UNNEST array. */
const MESSAGE_INSERT: readonly (readonly [keyof decide.MessageInsert, string])[] = [
  ['session_id', 'text'],
  ['seq', 'int'],
  ['role', 'text'],
  ['content', 'text'],
  ['tool_calls', 'text'],
  ['tool_call_id', 'text'],
  ['name', 'text'],
  ['created_at', 'text'],
  ['chars', 'int'],
  ['tokens', 'int'],
  ['transcript_hash', 'text'],
  ['answers_seq', 'int'],
];

/**
 * The `answers_seq` of an inserted message (migration 015): as computed, or
 * for a result whose assistant message was stored before this append, the
 * session's newest assistant message. The subquery sees the table as the
 * statement started, so a batch's own assistant message is computed, not
 * looked up.
 */
const NEWEST_ASSISTANT_OR_GIVEN = `CASE WHEN m.answers_seq = ${decide.ANSWERS_NEWEST_ASSISTANT}
      THEN (SELECT a.seq FROM messages a WHERE a.session_id = m.session_id AND a.role = 'assistant'
        ORDER BY a.seq DESC LIMIT 1)
      ELSE m.answers_seq END`;

/** Numbered parameters of one statement. */
class Params {
  readonly values: unknown[] = [];

  /** `value` as the next parameter, cast to `type`. */
  add(value: unknown, type: string): string {
    this.values.push(value);
    return `$${this.values.length}::${type}`;
  }
}

/** `INSERT INTO messages … SELECT … FROM <from>, UNNEST(<one array per column>)`. */
function insertMessagesSql(
  params: Params,
  rows: readonly decide.MessageInsert[],
  from?: string,
): string {
  const arrays = MESSAGE_INSERT.map(([column, type]) =>
    params.add(
      rows.map((row) => row[column]),
      `${type}[]`,
    ),
  );
  const columns = MESSAGE_INSERT.map(([column]) => column);
  // A result whose assistant message is already stored gets that message's seq here.
  const values = columns.map((column) =>
    column === 'answers_seq' ? NEWEST_ASSISTANT_OR_GIVEN : `m.${column}`,
  );
  return `INSERT INTO messages (${columns.join(', ')})
    SELECT ${values.join(', ')} FROM ${from === undefined ? '' : `${from}, `}UNNEST(${arrays.join(', ')}) AS m(${columns.join(', ')})`;
}

/** Inserts message rows in one statement: a turn's messages (or an import batch) cost one round trip. */
export async function insertMessageRows(
  c: Queryable,
  rows: readonly decide.MessageInsert[],
): Promise<void> {
  const params = new Params();
  await c.query(insertMessagesSql(params, rows.map(withPgContent)), params.values);
}

/**
 * The CTEs `ordered` (the events lock, taken once per row of `source`) and
 * `events` (the events, ids handed out under the lock, in array order).
 */
function insertEventsSql(
  params: Params,
  source: string,
  events: readonly store.NewEvent[],
  createdAt: string,
): string {
  const column = <T>(pick: (event: store.NewEvent) => T, type: string) =>
    params.add(events.map(pick), type);
  return `ordered AS MATERIALIZED (
      SELECT pg_advisory_xact_lock(${params.add(EVENTS_LOCK_KEY, 'bigint')}) FROM ${source}),
    events AS (
      INSERT INTO events (type, session_id, data, created_at)
      SELECT e.type, e.session_id, e.data, ${params.add(createdAt, 'text')}
      FROM ordered, UNNEST(${column((e) => e.type, 'text[]')}, ${column((e) => e.sessionId ?? null, 'text[]')},
        ${column((e) => JSON.stringify(e.data), 'text[]')}) WITH ORDINALITY AS e(type, session_id, data, n)
      ORDER BY e.n
      RETURNING id)`;
}

/** What the calls cost, summed (unpriced calls add nothing). */
function callsCost(calls: readonly store.NewModelCall[]): number {
  return calls.reduce((sum, call) => sum + (call.cost ?? 0), 0);
}

/**
 * The CTEs `call_blobs` and `calls`: a turn's model calls with the messages
 * they produced, only if `session` was written (the head still matched).
 */
function insertCallsSql(
  params: Params,
  sessionParam: string,
  calls: readonly store.NewModelCall[],
): string[] {
  const blobs = calls.flatMap((call) => call.blobs);
  const columns = MODEL_CALL_INSERT_COLUMNS;
  return [
    `call_blobs AS (
      INSERT INTO model_call_blobs (session_id, hash, body)
      SELECT ${sessionParam}, b.hash, b.body
      FROM session, UNNEST(${params.add(
        blobs.map((b) => b.hash),
        'text[]',
      )}, ${params.add(
        blobs.map((b) => b.body),
        'text[]',
      )}) AS b(hash, body)
      ON CONFLICT DO NOTHING)`,
    `calls AS (
      INSERT INTO model_calls (${columns.join(', ')})
      SELECT ${columns.map((column) => `r.${column}`).join(', ')}
      FROM session, json_populate_recordset(NULL::model_calls, ${params.add(modelCallsJson(calls), 'json')}) AS r)`,
  ];
}

/** Events, each with its id; `ids` as the insert returned them. */
function storedEvents(
  events: readonly store.NewEvent[],
  ids: readonly (number | string)[],
  createdAt: string,
): store.EventRow[] {
  const sorted = ids.map(Number).sort((a, b) => a - b);
  return events.map((event, i) => decide.storedEvent(sorted[i]!, event, createdAt));
}

/** Inserts events in one statement under the events lock; returns them with their ids. */
export async function insertEvents(
  c: Queryable,
  events: readonly store.NewEvent[],
  createdAt: string,
): Promise<store.EventRow[]> {
  const params = new Params();
  const { rows } = await c.query<{ ids: (number | string)[] }>(
    `WITH one AS (SELECT 1), ${insertEventsSql(params, 'one', events, createdAt)}
     SELECT ARRAY(SELECT id FROM events) AS ids`,
    params.values,
  );
  return storedEvents(events, rows[0]!.ids, createdAt);
}

function withPgContent(row: decide.MessageInsert): decide.MessageInsert {
  return { ...row, content: pgText(row.content) };
}

/**
 * Appends `write` if the session's head is still `head` (and the row still
 * at the write's `ifVersion`, when it names one), in one statement on `c`
 * (the pool: committed on its own; or a transaction's client). Undefined
 * when the row moved: nothing was written.
 */
export async function appendAt(
  c: Queryable,
  head: SessionHead,
  write: AppendWrite,
): Promise<Appended | undefined> {
  const { sessionId, messages, tokens, options, createdAt, eventType } = write;
  const numbered = decide.numberMessages(messages, head.last_seq, createdAt);
  const chain = decide.chainMessages(sessionId, numbered, tokens, head.transcript_hash, 'append');
  const rows = chain.rows.map(withPgContent);
  const counters = decide.appendCounters(options, messages.length, head.last_seq + messages.length);
  const events =
    eventType === undefined ? [] : rows.map((m) => decide.messageEvent(eventType, sessionId, m));
  const calls = options.modelCalls ?? [];
  const p = new Params();
  const id = p.add(sessionId, 'text');
  // Any write to the row since makes a new row version, with a new xmin.
  const version = p.add(options.ifVersion ?? null, 'xid');
  const ctes = [
    `session AS (
      UPDATE sessions SET${calls.length > 0 ? `\n        cost = cost + ${p.add(callsCost(calls), 'float8')},` : ''}
        message_count = message_count + ${p.add(counters.count, 'int')},
        last_seq = ${p.add(counters.last_seq, 'int')},
        transcript_hash = ${p.add(chain.transcript, 'text')},
        input_tokens = input_tokens + ${p.add(counters.input_tokens, 'bigint')},
        output_tokens = output_tokens + ${p.add(counters.output_tokens, 'bigint')},
        last_prompt_tokens = COALESCE(${p.add(counters.prompt_tokens, 'bigint')}, last_prompt_tokens),
        last_prompt_seq = CASE WHEN ${p.add(counters.prompt_tokens, 'bigint')} IS NULL
          THEN last_prompt_seq ELSE ${p.add(counters.prompt_seq, 'int')} END,
        updated_at = ${p.add(createdAt, 'text')},
        cache_read_tokens = cache_read_tokens + ${p.add(counters.cache_read_tokens, 'bigint')},
        cache_write_tokens = cache_write_tokens + ${p.add(counters.cache_write_tokens, 'bigint')}
      WHERE id = ${id} AND last_seq = ${p.add(head.last_seq, 'int')}
        AND transcript_hash IS NOT DISTINCT FROM ${p.add(head.transcript_hash, 'text')}
        AND (${version} IS NULL OR xmin = ${version})
      RETURNING owner_key, xmin::text AS version, row_to_json(sessions) AS row)`,
    `inserted AS (${insertMessagesSql(p, rows, 'session')})`,
  ];
  if (counters.charged > 0)
    ctes.push(
      `charged AS (${chargeOwnersSql('session', p.add(records.usageDay(), 'text'), p.add(counters.charged, 'bigint'))})`,
    );
  if (events.length > 0) ctes.push(insertEventsSql(p, 'session', events, createdAt));
  if (calls.length > 0) ctes.push(...insertCallsSql(p, id, calls));
  // The text depends only on which CTEs are present (the rows are arrays), so
  // it is one of four: named, it is parsed once per connection.
  const { rows: result } = await c.query<{
    row: store.SessionRow | null;
    version: string | null;
    ids: (number | string)[];
  }>(
    prepared(
      `WITH ${ctes.join(',\n')}
     SELECT (SELECT row FROM session) AS row, (SELECT version FROM session) AS version,
       ${events.length > 0 ? 'ARRAY(SELECT id FROM events)' : "'{}'::bigint[]"} AS ids`,
      p.values,
    ),
  );
  const written = result[0];
  if (written?.row == null || written.version === null) return undefined;
  return {
    messages: rows.map(records.toStoredMessage),
    events: storedEvents(events, written.ids, createdAt),
    head: { last_seq: counters.last_seq, transcript_hash: chain.transcript },
    session: { row: written.row, version: written.version },
  };
}
