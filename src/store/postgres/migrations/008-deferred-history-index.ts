/**
 * Migration 008 (Postgres twin of the SQLite one, which moves message
 * indexing for `history_search` off the append into batches). Postgres needs
 * no schema change for it: a GIN index's `fastupdate` pending list (on by
 * default) already defers the inverted-index work of each insert. The
 * migration is recorded so both dialects carry the same version numbers.
 * Frozen once landed; imports no app code.
 */
export const version = 8;
export const name = 'deferred-history-index';
export const up = `SELECT 1;`;
