/** The ordered list of Postgres migrations: the same numbers as SQLite's. Append only. */
import type { Migration } from '../../sqlite/migrations/index.js';
import * as m001 from './001-initial.js';
import * as m002 from './002-session-last-seq.js';
import * as m003 from './003-task-pending-approval.js';
import * as m004 from './004-transcript-hash.js';
import * as m005 from './005-compaction-cost.js';
import * as m006 from './006-instances.js';
import * as m007 from './007-message-tokens.js';
import * as m008 from './008-deferred-history-index.js';

export const POSTGRES_MIGRATIONS: readonly Migration[] = [
  m001,
  m002,
  m003,
  m004,
  m005,
  m006,
  m007,
  m008,
];

/** A column some migration adds, and the migration (`since`) that adds it. */
export interface RequiredColumn {
  readonly since: number;
  readonly table: string;
  readonly column: string;
  readonly definition: string;
}

/**
 * Columns that must exist whatever path a database took to get here, in
 * Postgres types (SQLite's REQUIRED_COLUMNS explains the pattern). Only the
 * columns of migrations already recorded as applied are ensured.
 */
export const POSTGRES_REQUIRED_COLUMNS: readonly RequiredColumn[] = [
  { since: 6, table: 'tasks', column: 'owner_instance', definition: 'TEXT' },
  { since: 1, table: 'sessions', column: 'compact_summary', definition: 'TEXT' },
  { since: 1, table: 'sessions', column: 'compact_size', definition: 'INTEGER NOT NULL DEFAULT 0' },
  {
    since: 1,
    table: 'sessions',
    column: 'compact_count',
    definition: 'DOUBLE PRECISION NOT NULL DEFAULT 50',
  },
  {
    since: 1,
    table: 'sessions',
    column: 'compaction_count',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  { since: 1, table: 'sessions', column: 'compact_seq', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 1, table: 'sessions', column: 'last_prompt_tokens', definition: 'BIGINT' },
  { since: 1, table: 'sessions', column: 'last_prompt_seq', definition: 'INTEGER' },
  {
    since: 1,
    table: 'sessions',
    column: 'compaction_suspended',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  { since: 1, table: 'sessions', column: 'epoch', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 1, table: 'messages', column: 'chars', definition: 'INTEGER' },
  { since: 2, table: 'sessions', column: 'last_seq', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { since: 3, table: 'tasks', column: 'pending_tool', definition: 'TEXT' },
  { since: 3, table: 'tasks', column: 'pending_arguments', definition: 'TEXT' },
  { since: 4, table: 'messages', column: 'transcript_hash', definition: 'TEXT' },
  { since: 4, table: 'sessions', column: 'transcript_hash', definition: 'TEXT' },
  {
    since: 5,
    table: 'compactions',
    column: 'input_tokens',
    definition: 'BIGINT NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'compactions',
    column: 'output_tokens',
    definition: 'BIGINT NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'sessions',
    column: 'compaction_input_tokens',
    definition: 'BIGINT NOT NULL DEFAULT 0',
  },
  {
    since: 5,
    table: 'sessions',
    column: 'compaction_output_tokens',
    definition: 'BIGINT NOT NULL DEFAULT 0',
  },
  { since: 7, table: 'messages', column: 'tokens', definition: 'INTEGER' },
];
