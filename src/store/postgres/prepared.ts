/**
 * Named statements. Postgres parses and plans an unnamed statement at every
 * call; a named one once per connection. For the statements a chat turn
 * sends (the session read, the one-statement append, the call records, the
 * session lock) that parse and plan took about as long as running them.
 * The store's reads and the dedicated connections' statements are named
 * too: their texts are fixed.
 *
 * A name is the hash of the text, so one text always has one name, on every
 * pooled connection. Only texts from a small fixed set may be named: each
 * stays prepared on each connection for the connection's life. Past
 * MAX_NAMED_TEXTS distinct texts, a text goes unnamed, as before.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';

export const MAX_NAMED_TEXTS = 128;

const names = new Map<string, string>();

/** `text` with `values` as a query config, named when the set of named texts has room. */
export function prepared(text: string, values: unknown[]): pg.QueryConfig {
  let name = names.get(text);
  if (name === undefined && names.size < MAX_NAMED_TEXTS) {
    name = `cairn_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    names.set(text, name);
  }
  return name === undefined ? { text, values } : { name, text, values };
}
