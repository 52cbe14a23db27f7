/**
 * How the SQLite store looks for a session's recall matches in the history
 * index, which holds every session's messages. Two ways find the same rows:
 *
 * - `session`: the session named as one more term (`session_id : "…" AND
 *   content : (…)`). SQLite's full-text AND reads the session's whole list
 *   of messages: about 3 ms at 100 000 messages, even for a word said once.
 * - `words`: the words alone (`content : (…)`); the join then keeps the
 *   session's rows. It reads only the words' matches, in every session:
 *   far cheaper when the words are rare, far dearer when they are common.
 *
 * The shorter read wins: the words' matches in the whole index (counted up
 * to a cap) against the session's compacted messages. Both ways rank by the
 * content column alone, so the plan changes what a search costs, never what
 * it finds.
 */

/** Counting a word's matches stops here: past it, the words are too common to search alone. */
export const WORD_MATCHES_CAP = 5_000;
/** A word's count is reused this long: counts change slowly, and a stale one only picks the slower plan. */
export const WORD_COUNT_TTL_MS = 60_000;
/** Counts remembered at most; the memo starts over past it. */
const MAX_COUNTED_WORDS = 4_096;

export type RecallPlan = 'session' | 'words';

export class RecallPlanner {
  private readonly counts = new Map<string, { count: number; at: number }>();

  constructor(
    /** Rows of the whole index matching `match` (one FTS term), counting stops after `cap`. */
    private readonly countMatches: (match: string, cap: number) => number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The cheaper plan for a search of `terms` (FTS terms, as `"word"` or
   * `"word"*`) over a session with `compacted` messages to search.
   */
  plan(terms: readonly string[], compacted: number): RecallPlan {
    const budget = Math.min(compacted, WORD_MATCHES_CAP);
    let total = 0;
    for (const term of terms) {
      total += this.matchesOf(term);
      if (total >= budget) return 'session';
    }
    return 'words';
  }

  private matchesOf(term: string): number {
    const at = this.now();
    const known = this.counts.get(term);
    if (known !== undefined && at - known.at < WORD_COUNT_TTL_MS) return known.count;
    if (this.counts.size >= MAX_COUNTED_WORDS) this.counts.clear();
    const count = this.countMatches(`content : ${term}`, WORD_MATCHES_CAP);
    this.counts.set(term, { count, at });
    return count;
  }
}
