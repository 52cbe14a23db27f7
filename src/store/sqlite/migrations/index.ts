/** The ordered list of SQLite migrations. Append only. */
import * as m001 from './001-initial.js';
import * as m002 from './002-session-last-seq.js';
import * as m003 from './003-task-pending-approval.js';
import * as m004 from './004-transcript-hash.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly up: string;
}

export const SQLITE_MIGRATIONS: readonly Migration[] = [m001, m002, m003, m004];

/**
 * Columns that must exist whatever path a database took to get here (the
 * report's `ensureColumn` pattern): a database created by an older build, or
 * one whose migration half-applied, gains them at startup. Idempotent.
 */
export const REQUIRED_COLUMNS: readonly { table: string; column: string; definition: string }[] = [
  { table: 'sessions', column: 'compact_summary', definition: 'TEXT' },
  { table: 'sessions', column: 'compact_size', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'sessions', column: 'compact_count', definition: 'REAL NOT NULL DEFAULT 50' },
  { table: 'sessions', column: 'compaction_count', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'sessions', column: 'compact_seq', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'sessions', column: 'last_prompt_tokens', definition: 'INTEGER' },
  { table: 'sessions', column: 'last_prompt_seq', definition: 'INTEGER' },
  { table: 'sessions', column: 'compaction_suspended', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'sessions', column: 'epoch', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'messages', column: 'chars', definition: 'INTEGER' },
  { table: 'messages', column: 'transcript_hash', definition: 'TEXT' },
  { table: 'sessions', column: 'transcript_hash', definition: 'TEXT' },
  { table: 'tasks', column: 'pending_tool', definition: 'TEXT' },
  { table: 'tasks', column: 'pending_arguments', definition: 'TEXT' },
];
