/**
 * Per-session stem counts on Postgres (`history_session_stems`, migration
 * 026): for each session, how many of its messages hold each word stem, and
 * under the empty stem how many messages were counted. Recall reads the
 * query's stems from it to weigh each word and to tell the words it may read
 * whole through the full-text index (rare in the session) from those it
 * reads only among the newest messages (common): an indexed read whose cost
 * does not grow with the session. Pure: no I/O.
 */
import { wordsOf } from '../records.js';
import { stemOf } from '../stem.js';

/** The stem whose row counts the session's messages. */
export const MESSAGES_STEM = '';
/** Longer words (pasted tokens, hashes) are not counted: recall's terms are words. */
const MAX_COUNTED_CHARS = 64;

/** A message as the vocabulary's batch reads it. */
export interface CountedMessage {
  session_id: string;
  role: string;
  content: string | null;
}

/** Rows to add to `history_session_stems`, as columns for one `unnest`. */
export interface SessionStemRows {
  sessionIds: string[];
  stems: string[];
  messages: number[];
}

/**
 * The distinct stems of each non-system message, counted per session, and
 * each session's number of messages under MESSAGES_STEM.
 */
export function countSessionStems(batch: readonly CountedMessage[]): SessionStemRows {
  const perSession = new Map<string, Map<string, number>>();
  for (const message of batch) {
    if (message.role === 'system') continue;
    let counts = perSession.get(message.session_id);
    if (counts === undefined) {
      counts = new Map();
      perSession.set(message.session_id, counts);
    }
    counts.set(MESSAGES_STEM, (counts.get(MESSAGES_STEM) ?? 0) + 1);
    const stems = new Set<string>();
    for (const word of wordsOf(message.content ?? '')) {
      if (word.length <= MAX_COUNTED_CHARS) stems.add(stemOf(word));
    }
    for (const stem of stems) counts.set(stem, (counts.get(stem) ?? 0) + 1);
  }
  const rows: SessionStemRows = { sessionIds: [], stems: [], messages: [] };
  for (const [sessionId, counts] of perSession) {
    for (const [stem, n] of counts) {
      rows.sessionIds.push(sessionId);
      rows.stems.push(stem);
      rows.messages.push(n);
    }
  }
  return rows;
}

/**
 * What a query term is counted under: a word by its stem, as recall matches
 * it; a prefix term by every stem starting with it (`lower` to `upper`).
 */
export function stemRange(term: { text: string; prefix: boolean }): {
  lower: string;
  upper: string;
} {
  if (term.prefix) return { lower: term.text, upper: `${term.text}\uffff` };
  const stem = stemOf(term.text);
  return { lower: stem, upper: stem };
}
