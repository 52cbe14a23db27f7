/**
 * The words the two dialects write differently in the schema. A migration is
 * one SQL text for both stores with these words in it; the few statements
 * that exist in one dialect only (SQLite's FTS5 tables and triggers,
 * Postgres's tsvector columns, GIN indexes and notify trigger) are picked per
 * dialect. Every word is part of landed migrations: the migration tests pin
 * the SQL each dialect runs, so a changed word fails them.
 */
export interface SchemaDialect {
  /** Text that sorts bytewise, as keyset paging needs (ids, times): Postgres's COLLATE "C". */
  readonly orderedText: string;
  /** An integer that may pass 2^31 (token counts, sums). */
  readonly bigInteger: string;
  /** A floating-point number. */
  readonly float: string;
  /** A primary key the database hands out. */
  readonly rowId: string;
  /** A primary key the database hands out and never hands out again, even after a delete. */
  readonly neverReusedRowId: string;
  /** The text of this dialect. */
  pick(texts: { sqlite: string; postgres: string }): string;
}

export const SQLITE_DIALECT: SchemaDialect = {
  orderedText: 'TEXT',
  bigInteger: 'INTEGER',
  float: 'REAL',
  rowId: 'INTEGER PRIMARY KEY',
  neverReusedRowId: 'INTEGER PRIMARY KEY AUTOINCREMENT',
  pick: (texts) => texts.sqlite,
};

export const POSTGRES_DIALECT: SchemaDialect = {
  orderedText: 'TEXT COLLATE "C"',
  bigInteger: 'BIGINT',
  float: 'DOUBLE PRECISION',
  rowId: 'BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY',
  neverReusedRowId: 'BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY',
  pick: (texts) => texts.postgres,
};
