/** The ordered list of SQLite migrations. Append only. */
import * as m001 from './001-initial.js';
import * as m002 from './002-session-last-seq.js';
import * as m005 from './005-compaction-cost.js';

export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly up: string;
}

export const SQLITE_MIGRATIONS: readonly Migration[] = [m001, m002, m005];

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
  { table: 'compactions', column: 'input_tokens', definition: 'INTEGER NOT NULL DEFAULT 0' },
  { table: 'compactions', column: 'output_tokens', definition: 'INTEGER NOT NULL DEFAULT 0' },
  {
    table: 'sessions',
    column: 'compaction_input_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
  {
    table: 'sessions',
    column: 'compaction_output_tokens',
    definition: 'INTEGER NOT NULL DEFAULT 0',
  },
];
