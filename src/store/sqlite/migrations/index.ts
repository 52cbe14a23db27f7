/** The ordered list of SQLite migrations. Append only. */
import * as m001 from './001-initial.js';
import * as m002 from './002-session-last-seq.js';
import * as m003 from './003-task-pending-approval.js';
import * as m004 from './004-transcript-hash.js';
import * as m005 from './005-compaction-cost.js';
import * as m006 from './006-instances.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly up: string;
}

export const SQLITE_MIGRATIONS: readonly Migration[] = [m001, m002, m003, m004, m005, m006];

/** A column some migration adds, and the migration (`since`) that adds it. */
export interface RequiredColumn {
  readonly since: number;
  readonly table: string;
  readonly column: string;
  readonly definition: string;
}

/**
 * Columns that must exist whatever path a database took to get here (the
 * report's `ensureColumn` pattern): a database created by an older build, or
 * one whose migration half-applied, gains them at startup. Idempotent. Only
 * the columns of migrations already recorded as applied are ensured, so a
 * later migration that adds its column with ALTER never finds it there first.
 */
export const REQUIRED_COLUMNS: readonly RequiredColumn[] = [
  { since: 6, table: 'tasks', column: 'owner_instance', definition: 'TEXT' },
  { since: 1, table: 'sessions', column: 'compact_summary', definition: 'TEXT' },
  { since: 1, table: 'sessions', column: 'compact_size', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 1, table: 'sessions', column: 'compact_count', definition: 'REAL NOT NULL DEFAULT 50' },
  {
    since: 1,
    table: 'sessions',
    column: 'compaction_count',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  { since: 1, table: 'sessions', column: 'compact_seq', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 1, table: 'sessions', column: 'last_prompt_tokens', definition: 'INTEGER' },
  { since: 1, table: 'sessions', column: 'last_prompt_seq', definition: 'INTEGER' },
  {
    since: 1,
    table: 'sessions',
    column: 'compaction_suspended',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  { since: 1, table: 'sessions', column: 'epoch', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 1, table: 'messages', column: 'chars', definition: 'INTEGER' },
  { since: 4, table: 'messages', column: 'transcript_hash', definition: 'TEXT' },
  { since: 4, table: 'sessions', column: 'transcript_hash', definition: 'TEXT' },
  { since: 3, table: 'tasks', column: 'pending_tool', definition: 'TEXT' },
  { since: 3, table: 'tasks', column: 'pending_arguments', definition: 'TEXT' },
  {
    since: 5,
    table: 'compactions',
    column: 'input_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'compactions',
    column: 'output_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'sessions',
    column: 'compaction_input_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'sessions',
    column: 'compaction_output_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
];
