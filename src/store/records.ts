/**
 * What both dialects share between a row and the `Store` contract: the row
 * shapes as selected, their conversion to the contract's types, the opaque
 * page cursor, ids, and the free-text words a search uses. SQL stays with
 * each dialect; nothing here touches a database.
 */
import { randomBytes } from 'node:crypto';
import { CairnError } from '../errors.js';
import { messageChars } from '../llm/messages.js';
import type { ChatMessage, StoredMessage, ToolCall } from '../llm/messages.js';
import type {
  EventRow,
  FrontEndChat,
  KeyAgents,
  KeyLimits,
  KeyRow,
  MessageMeta,
  ResponseRow,
  SearchTerm,
} from './store.js';
import { stemOf } from './stem.js';

/** A message row as selected with MESSAGE_COLUMNS (or CONTEXT_COLUMNS). */
export interface MessageRecord {
  session_id: string;
  seq: number;
  role: ChatMessage['role'];
  content: string | null;
  tool_calls: string | null;
  tool_call_id: string | null;
  name: string | null;
  created_at: string;
  /** Selected by context reads only (CONTEXT_COLUMNS); NULL on rows from before migration 007. */
  tokens?: number | null;
}

export interface EventRecord {
  id: number;
  type: string;
  session_id: string | null;
  data: string;
  created_at: string;
}

/** What compaction planning selects of a message (`listMessageMeta`). */
export interface MessageMetaRecord {
  seq: number;
  role: ChatMessage['role'];
  /** Stored size; NULL on rows written before it was stored. */
  chars: number | null;
  content_chars: number | null;
  tool_calls: string | null;
  tool_call_id: string | null;
}

/** Notes returned by one memory listing or search unless the caller asks for fewer or more. */
export const MEMORY_PAGE = 100;

/** The task columns `transitionTask` may set (never id, session or timestamps). */
export const TASK_PATCH_COLUMNS: readonly string[] = [
  'approval_expires_at',
  'status',
  'result',
  'question',
  'error',
  'pending_call_id',
  'pending_tool',
  'pending_arguments',
  'decided_by',
];

/** A task's error when its own server stopped (a restart found it running, or a shutdown's grace ran out). */
export const INTERRUPTED_ERROR =
  'The server stopped while this task was running. Resume it with POST /tasks/:id/resume.';

/**
 * A task's error when another instance swept it: the instance running it stopped
 * heartbeating (shut down, crashed, or paused past the stale limit). No apostrophe:
 * SQLite's statements carry it as a literal.
 */
export const INSTANCE_LOST_ERROR =
  'The Cairn instance running this task went away or stopped answering (shut down, crashed or paused), and another instance marked it interrupted. Resume it with POST /tasks/:id/resume.';

export const MESSAGE_COLUMNS =
  'session_id, seq, role, content, tool_calls, tool_call_id, name, created_at';
/**
 * What a context read selects: the message and its stored token estimate.
 * Pages of GET /sessions/:id/messages and exports keep MESSAGE_COLUMNS, so
 * their shape is unchanged.
 */
export const CONTEXT_COLUMNS = `${MESSAGE_COLUMNS}, tokens`;

export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('hex')}`;
}

export function now(): string {
  return new Date().toISOString();
}

export function toStoredMessage(row: MessageRecord): StoredMessage {
  const message: StoredMessage = {
    session_id: row.session_id,
    seq: row.seq,
    role: row.role,
    content: row.content,
    created_at: row.created_at,
  };
  if (row.tool_calls !== null) message.tool_calls = JSON.parse(row.tool_calls) as ToolCall[];
  if (row.tool_call_id !== null) message.tool_call_id = row.tool_call_id;
  if (row.name !== null) message.name = row.name;
  if (row.tokens !== undefined && row.tokens !== null) message.tokens = row.tokens;
  return message;
}

/** A `responses` row as selected (the body as JSON text). */
export type ResponseRecord = Omit<ResponseRow, 'body'> & { body: string };

export function toResponseRow(row: ResponseRecord): ResponseRow {
  return { ...row, body: JSON.parse(row.body) as Record<string, unknown> };
}

/**
 * The stored key of a front-end chat: the admin and "no end user" are ''
 * (the columns are part of a primary key, so they cannot be NULL).
 */
export function frontEndChatKey(chat: FrontEndChat): {
  protocol: string;
  key_id: string;
  end_user: string;
  agent_name: string;
  chat_id: string;
} {
  return {
    protocol: chat.protocol,
    key_id: chat.owner.key ?? '',
    end_user: chat.owner.user ?? '',
    agent_name: chat.agentName,
    chat_id: chat.chatId,
  };
}

export function toEventRow(row: EventRecord): EventRow {
  return { ...row, data: JSON.parse(row.data) as Record<string, unknown> };
}

export function toMessageMeta(row: MessageMetaRecord): MessageMeta {
  const calls = row.tool_calls === null ? undefined : (JSON.parse(row.tool_calls) as ToolCall[]);
  const meta: MessageMeta = {
    seq: row.seq,
    role: row.role,
    chars:
      row.chars ?? messageChars({ content: null, tool_calls: calls }) + (row.content_chars ?? 0),
  };
  if (calls) meta.callIds = calls.map((call) => call.id);
  if (row.tool_call_id !== null) meta.toolCallId = row.tool_call_id;
  return meta;
}

/** The opaque `nextCursor` of a page ordered by (created_at, id). */
export function encodeCursor(createdAt: string, id: string): string {
  return Buffer.from(JSON.stringify([createdAt, id])).toString('base64url');
}

export function decodeCursor(cursor: string): [string, string] {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (
      Array.isArray(value) &&
      value.length === 2 &&
      typeof value[0] === 'string' &&
      typeof value[1] === 'string'
    ) {
      return [value[0], value[1]];
    }
  } catch {
    // fall through to the validation error
  }
  throw new CairnError(
    'VALIDATION_ERROR',
    'cursor is not valid: pass the nextCursor of a previous page.',
  );
}

/** Recall terms that are plain words (anything else is dropped, so no term is a syntax error). */
export function plainTerms<T extends { text: string }>(terms: readonly T[]): T[] {
  return terms.filter((term) => /^[\p{L}\p{N}_]+$/u.test(term.text));
}

/** Lower case, accents removed: how both indexes compare words. */
export function foldWord(word: string): string {
  return word.normalize('NFD').replace(/\p{M}/gu, '').toLowerCase();
}

/** The words of a text as both full-text indexes split them: letters, digits, underscore. */
function splitWords(text: string): string[] {
  return text.match(/[\p{L}\p{N}_]+/gu) ?? [];
}

/** The folded words of a text, in order; a number written in thousands groups is one word. */
export function wordsOf(text: string): string[] {
  return splitWords(joinDigitGroups(text)).map(foldWord);
}

/** "4,500", "4.500" and "1,234,567" as one number each ("4500", "1234567"): one fact, one word. */
function joinDigitGroups(text: string): string {
  return text.replace(/(?<=\d)[,.](?=\d{3}(?!\d))/g, '');
}

/**
 * A number of four digits or more in thousands groups ("4500" → ["4", "500"]),
 * how an index that splits at the separator holds "4,500"; undefined for
 * anything else.
 */
export function digitGroups(word: string): string[] | undefined {
  if (!/^[1-9]\d{3,}$/.test(word)) return undefined;
  const groups: string[] = [];
  for (let end = word.length; end > 0; end -= 3)
    groups.unshift(word.slice(Math.max(0, end - 3), end));
  return groups;
}

/**
 * Whether `word` (folded) is one `term` finds: for a prefix term a word
 * starting with it; otherwise a word with the same Porter stem (what the
 * SQLite history index matches, migration 018), so "servers" finds "server".
 */
export function matchesTerm(term: SearchTerm, word: string): boolean {
  if (term.prefix) return word.startsWith(term.text);
  return word === term.text || stemOf(word) === stemOf(term.text);
}

/** The words of free text that a search looks for (at most 32), so no input is a syntax error. */
export function searchWords(text: string): string[] {
  return splitWords(text).slice(0, 32);
}

/** A `keys` row as selected (agents and limits as JSON text). */
export interface KeyRecord {
  id: string;
  name: string;
  agents: string;
  limits: string;
  secret_hash: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

/** The API's view of a key row: no secret hash. */
export function toKeyRow(row: KeyRecord): KeyRow {
  return {
    id: row.id,
    name: row.name,
    agents: JSON.parse(row.agents) as KeyAgents,
    limits: JSON.parse(row.limits) as KeyLimits,
    created_at: row.created_at,
    last_used_at: row.last_used_at,
    revoked_at: row.revoked_at,
  };
}

/** The UTC day a token count is charged to (`key_usage.day`). */
export function usageDay(at: string = now()): string {
  return at.slice(0, 10);
}
