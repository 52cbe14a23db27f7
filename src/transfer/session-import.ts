/**
 * Session import from NDJSON (the format of session-export.ts): the session
 * line is written under a new id, messages follow in batches as they arrive,
 * compactions last. Every line is checked against a JSON Schema, seqs must
 * increase, and the summary pointer must match the messages; on any problem
 * the half-written session is deleted and the import fails with the line
 * number and what is wrong.
 */
import { Ajv, type ValidateFunction } from 'ajv';
import { CairnError, describeError } from '../errors.js';
import type {
  ImportedCompaction,
  ImportedMessage,
  ImportedSession,
  CompactionStore,
  MessageLog,
  SessionRow,
  SessionStore,
} from '../store/store.js';
import { EXPORT_FORMAT, EXPORT_VERSION } from './session-export.js';
import { ADMIN_OWNER, type Owner } from '../store/store.js';

/** Messages written per transaction while importing. */
const IMPORT_BATCH = 500;
/** A single line longer than this is refused (a message is at most ~1 MB of text). */
export const IMPORT_MAX_LINE_CHARS = 16 * 1024 * 1024;

export type ImportStore = Pick<
  SessionStore,
  'createImportedSession' | 'deleteSession' | 'findSession'
> &
  Pick<MessageLog, 'appendImportedMessages'> &
  Pick<CompactionStore, 'appendImportedCompactions'>;

const INT = { type: 'integer', minimum: 0 } as const;
const TEXT = { type: 'string' } as const;
const TEXT_OR_NULL = { type: ['string', 'null'] } as const;
const INT_OR_NULL = { type: ['integer', 'null'], minimum: 0 } as const;

const SESSION_LINE = {
  type: 'object',
  required: ['type', 'format', 'version', 'session'],
  properties: {
    type: { const: 'session' },
    format: { const: EXPORT_FORMAT },
    version: { const: EXPORT_VERSION },
    session: {
      type: 'object',
      required: ['agent_name', 'mode', 'status', 'created_at', 'updated_at'],
      properties: {
        agent_name: TEXT,
        mode: { enum: ['chat', 'task', 'subagent', 'daemon'] },
        status: { enum: ['active', 'closed'] },
        title: TEXT_OR_NULL,
        created_at: TEXT,
        updated_at: TEXT,
        input_tokens: INT,
        output_tokens: INT,
        compact_summary: TEXT_OR_NULL,
        compact_size: INT,
        compact_count: { type: 'number', minimum: 1, maximum: 99 },
        compaction_count: INT,
        compact_seq: INT,
        last_prompt_tokens: INT_OR_NULL,
        last_prompt_seq: INT_OR_NULL,
        compaction_suspended: { enum: [0, 1] },
        compaction_input_tokens: INT,
        compaction_output_tokens: INT,
        end_user: { type: ['string', 'null'], maxLength: 200 },
      },
    },
  },
} as const;

const MESSAGE_LINE = {
  type: 'object',
  required: ['type', 'message'],
  properties: {
    type: { const: 'message' },
    message: {
      type: 'object',
      required: ['seq', 'role', 'created_at'],
      properties: {
        seq: { type: 'integer', minimum: 1 },
        role: { enum: ['system', 'user', 'assistant', 'tool'] },
        content: TEXT_OR_NULL,
        tool_calls: {
          type: 'array',
          items: {
            type: 'object',
            required: ['id', 'type', 'function'],
            properties: {
              id: TEXT,
              type: { const: 'function' },
              function: {
                type: 'object',
                required: ['name', 'arguments'],
                properties: { name: TEXT, arguments: TEXT },
              },
            },
          },
        },
        tool_call_id: TEXT,
        name: TEXT,
        created_at: TEXT,
      },
    },
  },
} as const;

const COMPACTION_LINE = {
  type: 'object',
  required: ['type', 'compaction'],
  properties: {
    type: { const: 'compaction' },
    compaction: {
      type: 'object',
      required: [
        'from_size',
        'to_size',
        'from_seq',
        'to_seq',
        'summary',
        'trigger',
        'model',
        'created_at',
      ],
      properties: {
        from_size: INT,
        to_size: INT,
        from_seq: INT,
        to_seq: INT,
        previous_summary: TEXT_OR_NULL,
        summary: TEXT,
        trigger: { enum: ['manual', 'auto'] },
        model: TEXT,
        input_chars: INT,
        summary_chars: INT,
        input_tokens: INT,
        output_tokens: INT,
        created_at: TEXT,
        undone_at: TEXT_OR_NULL,
      },
    },
  },
} as const;

interface Validators {
  session: ValidateFunction<{ session: Partial<SessionRow> & ImportedSessionCore }>;
  message: ValidateFunction<{ message: ImportedMessage }>;
  compaction: ValidateFunction<{ compaction: Partial<ImportedCompaction> & CompactionCore }>;
}
type ImportedSessionCore = Pick<
  SessionRow,
  'agent_name' | 'mode' | 'status' | 'created_at' | 'updated_at'
>;
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

/**
 * Splits a stream of text chunks into lines (without their newline), refusing
 * a line longer than IMPORT_MAX_LINE_CHARS. Blank lines are skipped.
 */
export async function* ndjsonLines(
  chunks: AsyncIterable<string | Uint8Array>,
): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of chunks) {
    buffer += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, '');
      buffer = buffer.slice(end + 1);
      if (line.trim() !== '') yield line;
    }
    if (buffer.length > IMPORT_MAX_LINE_CHARS) {
      throw new CairnError(
        'PAYLOAD_TOO_LARGE',
        `An import line is longer than ${IMPORT_MAX_LINE_CHARS} characters.`,
      );
    }
  }
  buffer += decoder.decode();
  if (buffer.trim() !== '') yield buffer;
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
): Promise<SessionRow> {
  const v = lineValidators();
  let id: string | undefined;
  try {
    let lineNo = 0;
    let header: ImportedSession | undefined;
    let lastSeq = 0;
    /** Non-system messages at or before the summary pointer. */
    let coveredBySummary = 0;
    let batch: ImportedMessage[] = [];
    const compactions: ImportedCompaction[] = [];
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
        header = toImportedSession(value.session);
        id = await store.createImportedSession(header, owner);
        continue;
      }
      if (value.type === 'message') {
        if (!v.message(value)) throw invalid(lineNo, firstError(v.message));
        if (compactions.length > 0)
          throw invalid(lineNo, 'message lines must come before compaction lines');
        const message = toImportedMessage(value.message);
        if (message.seq <= lastSeq)
          throw invalid(lineNo, `seq ${message.seq} must be greater than ${lastSeq}`);
        lastSeq = message.seq;
        if (message.role !== 'system' && message.seq <= header.compact_seq) coveredBySummary += 1;
        batch.push(message);
        if (batch.length >= IMPORT_BATCH) {
          await store.appendImportedMessages(id!, batch);
          batch = [];
        }
      } else if (value.type === 'compaction') {
        if (!v.compaction(value)) throw invalid(lineNo, firstError(v.compaction));
        compactions.push(toImportedCompaction(value.compaction));
      } else {
        throw invalid(lineNo, 'type must be "message" or "compaction" after the session line');
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
    return (await store.findSession(id))!;
  } catch (err) {
    // Nothing half-imported stays behind.
    if (id !== undefined) await store.deleteSession(id).catch(() => undefined);
    throw err;
  }
}

function toImportedSession(s: Partial<SessionRow> & ImportedSessionCore): ImportedSession {
  return {
    agent_name: s.agent_name,
    mode: s.mode,
    status: s.status,
    title: s.title ?? null,
    created_at: s.created_at,
    updated_at: s.updated_at,
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
    end_user: s.end_user ?? null,
  };
}

function toImportedMessage(m: ImportedMessage): ImportedMessage {
  return {
    seq: m.seq,
    role: m.role,
    content: m.content ?? null,
    ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.name !== undefined ? { name: m.name } : {}),
    created_at: m.created_at,
  };
}

function toImportedCompaction(c: Partial<ImportedCompaction> & CompactionCore): ImportedCompaction {
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
    created_at: c.created_at,
    undone_at: c.undone_at ?? null,
  };
}
