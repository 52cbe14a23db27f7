/**
 * Session import from NDJSON (the format of session-export.ts): the session
 * line is written under a new id, messages follow in batches as they arrive,
 * compactions last, then the messages' vectors (hybrid recall; an export
 * without them is embedded by the background walk instead). Every line is checked against a JSON Schema, seqs must
 * increase, and the summary pointer must match the messages; on any problem
 * the half-written session is deleted and the import fails with the line
 * number and what is wrong.
 */
import { Ajv, type SchemaObject, type ValidateFunction } from 'ajv';
import { CairnError, describeError } from '../errors.js';
import type {
  ImportedCompaction,
  ImportedMessage,
  ImportedSession,
  CompactionStore,
  MessageLog,
  MessageVector,
  SessionRow,
  SessionStore,
  VectorStore,
} from '../store/store.js';
import { vectorOf } from '../store/vector-bytes.js';
import { EXPORT_FORMAT, EXPORT_VERSION } from './session-export.js';
import { ADMIN_OWNER, MAX_DROPPED_ITEMS, type Owner } from '../store/store.js';

/** Messages written per transaction while importing. */
const IMPORT_BATCH = 500;
/** A single line longer than this is refused (a message is at most ~1 MB of text). */
export const IMPORT_MAX_LINE_BYTES = 16 * 1024 * 1024;

export type ImportStore = Pick<
  SessionStore,
  'createImportedSession' | 'deleteSession' | 'findSession'
> &
  Pick<MessageLog, 'appendImportedMessages'> &
  Pick<CompactionStore, 'appendImportedCompactions'> &
  Pick<VectorStore, 'appendImportedVectors'>;

/**
 * The largest seq, size or count an import may carry: both stores keep them as
 * 32-bit integers, and the session must still have room to grow (an imported
 * seq near 2^53 once made every later chat on the session a 500).
 */
export const MAX_IMPORTED_SEQ = 1_000_000_000;
/** Seqs, sizes and counts. */
const INT = { type: 'integer', minimum: 0, maximum: MAX_IMPORTED_SEQ } as const;
/** Token counts: 64-bit in both stores, so any integer a JavaScript number holds exactly. */
const TOKENS = { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;
const TEXT = { type: 'string' } as const;
const TEXT_OR_NULL = { type: ['string', 'null'] } as const;
const INT_OR_NULL = { type: ['integer', 'null'], minimum: 0, maximum: MAX_IMPORTED_SEQ } as const;
const TOKENS_OR_NULL = {
  type: ['integer', 'null'],
  minimum: 0,
  maximum: Number.MAX_SAFE_INTEGER,
} as const;

/** An object schema: these properties, the `required` ones present. */
function object(required: readonly string[], properties: Record<string, object>): SchemaObject {
  return { type: 'object', required, properties };
}

/**
 * The schema of one line: `type` names it and the record sits under the same
 * key (`{"type": "message", "message": {…}}`); `header` adds constants before it.
 */
function lineSchema(
  type: string,
  record: SchemaObject,
  header: Record<string, object> = {},
): SchemaObject {
  return object(['type', ...Object.keys(header), type], {
    type: { const: type },
    ...header,
    [type]: record,
  });
}

const SESSION_LINE = lineSchema(
  'session',
  object(['agent_name', 'mode', 'status', 'created_at', 'updated_at'], {
    agent_name: TEXT,
    mode: { enum: ['chat', 'task', 'subagent', 'daemon'] },
    status: { enum: ['active', 'closed'] },
    title: TEXT_OR_NULL,
    created_at: TEXT,
    updated_at: TEXT,
    input_tokens: TOKENS,
    output_tokens: TOKENS,
    compact_summary: TEXT_OR_NULL,
    compact_size: INT,
    compact_count: { type: 'number', minimum: 1, maximum: 99 },
    compaction_count: INT,
    compact_seq: INT,
    last_prompt_tokens: TOKENS_OR_NULL,
    last_prompt_seq: INT_OR_NULL,
    compaction_suspended: { enum: [0, 1] },
    compaction_input_tokens: TOKENS,
    compaction_output_tokens: TOKENS,
    cost: { type: 'number', minimum: 0 },
    cache_read_tokens: TOKENS,
    cache_write_tokens: TOKENS,
    end_user: { type: ['string', 'null'], maxLength: 200 },
  }),
  { format: { const: EXPORT_FORMAT }, version: { const: EXPORT_VERSION } },
);

const MESSAGE_LINE = lineSchema(
  'message',
  object(['seq', 'role', 'created_at'], {
    seq: { type: 'integer', minimum: 1, maximum: MAX_IMPORTED_SEQ },
    role: { enum: ['system', 'user', 'assistant', 'tool'] },
    content: TEXT_OR_NULL,
    tool_calls: {
      type: 'array',
      items: object(['id', 'type', 'function'], {
        id: TEXT,
        type: { const: 'function' },
        function: object(['name', 'arguments'], { name: TEXT, arguments: TEXT }),
      }),
    },
    tool_call_id: TEXT,
    name: TEXT,
    created_at: TEXT,
  }),
);

const COMPACTION_LINE = lineSchema(
  'compaction',
  object(
    ['from_size', 'to_size', 'from_seq', 'to_seq', 'summary', 'trigger', 'model', 'created_at'],
    {
      from_size: INT,
      to_size: INT,
      from_seq: INT,
      to_seq: INT,
      previous_summary: TEXT_OR_NULL,
      summary: TEXT,
      trigger: { enum: ['manual', 'auto', 'background'] },
      model: TEXT,
      input_chars: INT,
      summary_chars: INT,
      input_tokens: TOKENS,
      output_tokens: TOKENS,
      created_at: TEXT,
      undone_at: TEXT_OR_NULL,
      dropped: {
        anyOf: [
          { type: 'null' },
          {
            type: 'array',
            maxItems: MAX_DROPPED_ITEMS,
            items: object(['text', 'kind', 'seq'], {
              text: TEXT,
              kind: { enum: ['identifier', 'number', 'date', 'quote', 'name'] },
              seq: INT,
            }),
          },
        ],
      },
    },
  ),
);

const VECTOR_LINE = lineSchema(
  'vector',
  object(['seq', 'model', 'dimensions', 'data'], {
    seq: { type: 'integer', minimum: 1, maximum: MAX_IMPORTED_SEQ },
    model: { type: 'string', minLength: 1, maxLength: 200 },
    dimensions: { type: 'integer', minimum: 1, maximum: 8192 },
    data: { type: 'string', pattern: '^[A-Za-z0-9+/]*={0,2}$' },
  }),
);

interface VectorLine {
  seq: number;
  model: string;
  dimensions: number;
  data: string;
}

interface Validators {
  session: ValidateFunction<{ session: SessionLine }>;
  message: ValidateFunction<{ message: ImportedMessage }>;
  compaction: ValidateFunction<{ compaction: CompactionLine }>;
  vector: ValidateFunction<{ vector: VectorLine }>;
}
type ImportedSessionCore = Pick<
  SessionRow,
  'agent_name' | 'mode' | 'status' | 'created_at' | 'updated_at'
>;
/** A session line's record as validated: the required fields, any of the others. */
type SessionLine = Partial<SessionRow> & ImportedSessionCore;
/** A compaction line's record as validated. */
type CompactionLine = Partial<ImportedCompaction> & CompactionCore;
type CompactionCore = Pick<
  ImportedCompaction,
  'from_size' | 'to_size' | 'from_seq' | 'to_seq' | 'summary' | 'trigger' | 'model' | 'created_at'
>;

let validators: Validators | undefined;
/** Compiled once per process. */
function lineValidators(): Validators {
  if (!validators) {
    const ajv = new Ajv({ allErrors: false, strict: false });
    validators = {
      session: ajv.compile(SESSION_LINE),
      message: ajv.compile(MESSAGE_LINE),
      compaction: ajv.compile(COMPACTION_LINE),
      vector: ajv.compile(VECTOR_LINE),
    };
  }
  return validators;
}

function invalid(lineNo: number, what: string): CairnError {
  return new CairnError('VALIDATION_ERROR', `Import line ${lineNo}: ${what}`);
}

function firstError(validate: ValidateFunction): string {
  const e = validate.errors?.[0];
  if (!e) return 'is not valid';
  const where = e.instancePath ? e.instancePath.slice(1) : 'line';
  const allowed = (e.params as { allowedValues?: unknown[]; allowedValue?: unknown }).allowedValues;
  return `${where} ${e.message ?? 'is not valid'}${allowed ? ` (${allowed.map((v) => JSON.stringify(v)).join(', ')})` : ''}`;
}

function parseLine(text: string, lineNo: number): { type?: unknown } {
  try {
    const value = JSON.parse(text) as unknown;
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return value;
  } catch (err) {
    throw invalid(lineNo, `not JSON (${describeError(err)})`);
  }
  throw invalid(lineNo, 'must be a JSON object');
}

const NEWLINE = 0x0a;

function lineTooLong(): CairnError {
  return new CairnError(
    'IMPORT_LINE_TOO_LONG',
    `An import line is longer than ${IMPORT_MAX_LINE_BYTES} bytes (${IMPORT_MAX_LINE_BYTES / 1024 / 1024} MiB). Nothing was imported.`,
  );
}

function decodeLine(parts: readonly Buffer[]): string {
  const line = (parts.length === 1 ? parts[0]! : Buffer.concat(parts)).toString('utf8');
  return line.endsWith('\r') ? line.slice(0, -1) : line;
}

/**
 * Splits a stream of chunks into lines (without their newline), refusing a
 * line longer than IMPORT_MAX_LINE_BYTES as soon as it gets that long. A line
 * is held as the chunks it arrived in and decoded once, when complete: only
 * each new chunk is searched for a newline, so a long line costs its size,
 * never its size squared (a 16 MB line once stalled the server for seconds).
 * Blank lines are skipped.
 */
export async function* ndjsonLines(
  chunks: AsyncIterable<string | Uint8Array>,
): AsyncGenerator<string> {
  let parts: Buffer[] = [];
  let held = 0;
  for await (const chunk of chunks) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : Buffer.from(chunk);
    let start = 0;
    let end: number;
    while ((end = bytes.indexOf(NEWLINE, start)) >= 0) {
      if (held + end - start > IMPORT_MAX_LINE_BYTES) throw lineTooLong();
      parts.push(bytes.subarray(start, end));
      const line = decodeLine(parts);
      parts = [];
      held = 0;
      start = end + 1;
      if (line.trim() !== '') yield line;
    }
    if (start < bytes.length) {
      held += bytes.length - start;
      if (held > IMPORT_MAX_LINE_BYTES) throw lineTooLong();
      parts.push(bytes.subarray(start));
    }
  }
  const last = decodeLine(parts);
  if (last.trim() !== '') yield last;
}

/**
 * Imports one exported session from its lines; returns the new session row.
 * `checkAgent` throws (AGENT_NOT_FOUND) when the agent is not loaded here.
 */
export async function importSession(
  store: ImportStore,
  lines: AsyncIterable<string>,
  checkAgent: (name: string) => void,
  owner: Owner = ADMIN_OWNER,
  now: () => number = Date.now,
): Promise<SessionRow> {
  const v = lineValidators();
  const importedAt = now();
  let id: string | undefined;
  try {
    let lineNo = 0;
    /** A timestamp of the current line, as the store keeps them (see `importedTime`). */
    const time: ImportedTime = (value, field) => importedTime(value, importedAt, lineNo, field);
    let header: ImportedSession | undefined;
    let lastSeq = 0;
    /** Seqs of the non-system messages, in order: what a compaction row's sizes count. */
    const conversationSeqs: number[] = [];
    /** Non-system messages at or before the summary pointer. */
    let coveredBySummary = 0;
    let batch: ImportedMessage[] = [];
    const compactions: ImportedCompaction[] = [];
    const vectors: MessageVector[] = [];
    const importedSeqs = new Set<number>();
    for await (const text of lines) {
      lineNo += 1;
      const value = parseLine(text, lineNo);
      if (header === undefined) {
        if (!v.session(value)) {
          throw invalid(
            lineNo,
            value.type === 'session'
              ? firstError(v.session)
              : 'the first line must be the session line of a `cairn sessions export` (type "session")',
          );
        }
        checkAgent(value.session.agent_name);
        header = toImportedSession(value.session, time);
        id = await store.createImportedSession(header, owner);
        continue;
      }
      if (value.type === 'message') {
        if (!v.message(value)) throw invalid(lineNo, firstError(v.message));
        if (compactions.length > 0)
          throw invalid(lineNo, 'message lines must come before compaction lines');
        const message = toImportedMessage(value.message, time);
        if (message.seq <= lastSeq)
          throw invalid(lineNo, `seq ${message.seq} must be greater than ${lastSeq}`);
        // The context puts every system message first: one in mid-history would
        // be promoted to an instruction, so only the opening ones are accepted.
        if (message.role === 'system' && conversationSeqs.length > 0)
          throw invalid(
            lineNo,
            `a system message may only open the history; seq ${message.seq} comes after the conversation started`,
          );
        lastSeq = message.seq;
        importedSeqs.add(message.seq);
        if (message.role !== 'system') conversationSeqs.push(message.seq);
        if (message.role !== 'system' && message.seq <= header.compact_seq) coveredBySummary += 1;
        batch.push(message);
        if (batch.length >= IMPORT_BATCH) {
          await store.appendImportedMessages(id!, batch);
          batch = [];
        }
      } else if (value.type === 'compaction') {
        if (!v.compaction(value)) throw invalid(lineNo, firstError(v.compaction));
        const compaction = toImportedCompaction(value.compaction, time);
        checkCompactionFits(compaction, conversationSeqs, lineNo);
        compactions.push(compaction);
      } else if (value.type === 'vector') {
        if (!v.vector(value)) throw invalid(lineNo, firstError(v.vector));
        vectors.push(toImportedVector(value.vector, importedSeqs, lineNo));
      } else {
        throw invalid(
          lineNo,
          'type must be "message", "compaction" or "vector" after the session line',
        );
      }
    }
    if (header === undefined || id === undefined)
      throw invalid(0, 'the body is empty: send the output of GET /sessions/:id/export');
    await store.appendImportedMessages(id, batch);
    if (coveredBySummary !== header.compact_size || header.compact_seq > lastSeq) {
      throw new CairnError(
        'VALIDATION_ERROR',
        `Import: the summary pointer does not match the messages (compact_size ${header.compact_size}, compact_seq ${header.compact_seq}, but ${coveredBySummary} message(s) up to that seq). Export the session again; do not edit the file.`,
      );
    }
    await store.appendImportedCompactions(id, compactions);
    await store.appendImportedVectors(id, vectors);
    return (await store.findSession(id))!;
  } catch (err) {
    // Nothing half-imported stays behind.
    if (id !== undefined) await store.deleteSession(id).catch(() => undefined);
    throw err;
  }
}

/** A `vector` line as stored: its message was imported, its bytes hold `dimensions` float32s. */
function toImportedVector(
  line: VectorLine,
  seqs: ReadonlySet<number>,
  lineNo: number,
): MessageVector {
  if (!seqs.has(line.seq))
    throw invalid(lineNo, `vector.seq ${line.seq} names no message imported before it`);
  const bytes = Buffer.from(line.data, 'base64');
  if (bytes.byteLength !== line.dimensions * 4)
    throw invalid(
      lineNo,
      `vector.data holds ${bytes.byteLength} bytes; ${line.dimensions} dimensions need ${line.dimensions * 4}`,
    );
  return { seq: line.seq, model: line.model, dimensions: line.dimensions, vector: vectorOf(bytes) };
}

/**
 * An imported timestamp, as the store writes them (ISO 8601), and never later
 * than the import: a session dated in the future would otherwise stay the
 * newest one for ever (and win transcript matching against live ones).
 */
function importedTime(value: string, importedAt: number, lineNo: number, field: string): string {
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw invalid(lineNo, `${field} "${value.slice(0, 40)}" is not a timestamp`);
  return new Date(Math.min(ms, importedAt)).toISOString();
}

/** Reads one timestamp field of the line being imported. */
type ImportedTime = (value: string, field: string) => string;

/** How many of the (sorted) `seqs` are at or below `seq`. */
function countUpTo(seqs: readonly number[], seq: number): number {
  let low = 0;
  let high = seqs.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (seqs[mid]! <= seq) low = mid + 1;
    else high = mid;
  }
  return low;
}

/**
 * A compaction row describes the summary pointer moving forward over the
 * imported messages: its seqs lie within them, and each size is the number
 * of conversation messages up to its seq (as the store counts them).
 */
function checkCompactionFits(
  c: ImportedCompaction,
  conversationSeqs: readonly number[],
  lineNo: number,
): void {
  const lastSeq = conversationSeqs.at(-1) ?? 0;
  const problem =
    c.from_seq > c.to_seq
      ? `from_seq ${c.from_seq} is after to_seq ${c.to_seq}`
      : c.to_seq > lastSeq
        ? `to_seq ${c.to_seq} is after the last imported message (${lastSeq})`
        : countUpTo(conversationSeqs, c.from_seq) !== c.from_size
          ? `from_size ${c.from_size} does not count the messages up to seq ${c.from_seq}`
          : countUpTo(conversationSeqs, c.to_seq) !== c.to_size
            ? `to_size ${c.to_size} does not count the messages up to seq ${c.to_seq}`
            : undefined;
  if (problem !== undefined)
    throw invalid(lineNo, `the compaction does not fit the imported messages: ${problem}`);
}

function toImportedSession(s: SessionLine, time: ImportedTime): ImportedSession {
  return {
    agent_name: s.agent_name,
    mode: s.mode,
    status: s.status,
    title: s.title ?? null,
    created_at: time(s.created_at, 'session.created_at'),
    updated_at: time(s.updated_at, 'session.updated_at'),
    input_tokens: s.input_tokens ?? 0,
    output_tokens: s.output_tokens ?? 0,
    compact_summary: s.compact_summary ?? null,
    compact_size: s.compact_size ?? 0,
    compact_count: s.compact_count ?? 50,
    compaction_count: s.compaction_count ?? 0,
    compact_seq: s.compact_seq ?? 0,
    last_prompt_tokens: s.last_prompt_tokens ?? null,
    last_prompt_seq: s.last_prompt_seq ?? null,
    compaction_suspended: s.compaction_suspended ?? 0,
    compaction_input_tokens: s.compaction_input_tokens ?? 0,
    compaction_output_tokens: s.compaction_output_tokens ?? 0,
    cost: s.cost ?? 0,
    cache_read_tokens: s.cache_read_tokens ?? 0,
    cache_write_tokens: s.cache_write_tokens ?? 0,
    end_user: s.end_user ?? null,
  };
}

function toImportedMessage(m: ImportedMessage, time: ImportedTime): ImportedMessage {
  return {
    seq: m.seq,
    role: m.role,
    content: m.content ?? null,
    ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.name !== undefined ? { name: m.name } : {}),
    created_at: time(m.created_at, 'message.created_at'),
  };
}

function toImportedCompaction(c: CompactionLine, time: ImportedTime): ImportedCompaction {
  return {
    from_size: c.from_size,
    to_size: c.to_size,
    from_seq: c.from_seq,
    to_seq: c.to_seq,
    previous_summary: c.previous_summary ?? null,
    summary: c.summary,
    trigger: c.trigger,
    model: c.model,
    input_chars: c.input_chars ?? 0,
    summary_chars: c.summary_chars ?? c.summary.length,
    input_tokens: c.input_tokens ?? 0,
    output_tokens: c.output_tokens ?? 0,
    created_at: time(c.created_at, 'compaction.created_at'),
    undone_at: c.undone_at == null ? null : time(c.undone_at, 'compaction.undone_at'),
    // An export from before `dropped` was recorded has none: nobody looked.
    dropped: c.dropped ?? null,
  };
}
