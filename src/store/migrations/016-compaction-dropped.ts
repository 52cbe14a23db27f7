/**
 * Migration 016: what each compaction dropped. A compaction row records, as a
 * JSON array of `{text, kind, seq}`, the identifiers, numbers, dates, quoted
 * strings and names of the folded messages that its summary does not
 * contain. Rows written before this migration keep NULL: nobody looked then.
 * No table is rewritten. Frozen once landed; the same SQL in both dialects.
 */
export const version = 16;
export const name = 'compaction-dropped';
export const up = (): string => `
ALTER TABLE compactions ADD COLUMN dropped TEXT;
`;
