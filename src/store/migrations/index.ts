/**
 * The ordered list of migrations, one list for both dialects: each is one
 * SQL text with the words of a dialect in it (`dialect.ts`). Append only.
 */
import { POSTGRES_DIALECT, SQLITE_DIALECT, type SchemaDialect } from './dialect.js';
import * as m001 from './001-initial.js';
import * as m002 from './002-session-last-seq.js';
import * as m003 from './003-task-pending-approval.js';
import * as m004 from './004-transcript-hash.js';
import * as m005 from './005-compaction-cost.js';
import * as m006 from './006-instances.js';
import * as m007 from './007-message-tokens.js';
import * as m008 from './008-deferred-history-index.js';
import * as m009 from './009-principals.js';
import * as m010 from './010-model-call-records.js';
import * as m012 from './012-prompt-cache-and-approval-timeouts.js';
import * as m013 from './013-responses.js';
import * as m014 from './014-session-scoped-history-index.js';
import * as m015 from './015-one-result-per-call.js';
import * as m016 from './016-compaction-dropped.js';
import * as m018 from './018-stemmed-history-index.js';
import * as m019 from './019-prepared-compactions.js';
import * as m020 from './020-front-end-chats.js';
import * as m021 from './021-message-vectors.js';
import * as m022 from './022-budget-reservations.js';
import * as m023 from './023-history-vocabulary.js';
import * as m025 from './025-chat-streams.js';
import * as m026 from './026-session-stems.js';
import * as m027 from './027-split-search-words.js';

/** A migration as one dialect runs it. */
export interface Migration {
  readonly version: number;
  readonly name: string;
  readonly up: string;
}

interface MigrationSource {
  readonly version: number;
  readonly name: string;
  readonly up: (dialect: SchemaDialect) => string;
}

// Versions need not be contiguous: there is no 011, nor 017 or 024 (other branches' numbers).
const MIGRATIONS: readonly MigrationSource[] = [
  m001,
  m002,
  m003,
  m004,
  m005,
  m006,
  m007,
  m008,
  m009,
  m010,
  m012,
  m013,
  m014,
  m015,
  m016,
  m018,
  m019,
  m020,
  m021,
  m022,
  m023,
  m025,
  m026,
  m027,
];

function inDialect(dialect: SchemaDialect): readonly Migration[] {
  return MIGRATIONS.map(({ version, name, up }) => ({ version, name, up: up(dialect) }));
}

/**
 * The migrations are the one source of truth for the schema: the columns the
 * startup check restores (`ensureColumns`) are read from what the applied
 * migrations build, never from a second list (see `requiredColumns`).
 */
export const SQLITE_MIGRATIONS = inDialect(SQLITE_DIALECT);
export const POSTGRES_MIGRATIONS = inDialect(POSTGRES_DIALECT);
