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
 * A session shorter than WORD_MATCHES_CAP is read the first way: its own
 * entries cost little (some 0.03 ms a thousand), less than counting the
 * words' would. A longer one is read the second way when the words have
 * fewer matches than that cap in the whole index (counted, no further than
 * needed). Both ways rank by the content column alone, so the plan changes
 * what a search costs, never what it finds.
 */

/** The words alone are searched only below this many matches, and only for a session this long. */
export const WORD_MATCHES_CAP = 5_000;
/** Recall reads one word alone (in every session) below this many matches in the whole index. */
export const RARE_WORD_MATCHES = 1_000;
/**
 * A word held by this share of a session's searched messages or more is
 * common there: recall does not read its rows again while the share is
 * remembered (it weighs little; it still counts in the ranking of the rows
 * the rarer words find).
 */
export const COMMON_SHARE = 0.2;
/**
 * Words remembered as common are skipped only in a session with this many
 * messages to search or more: in a shorter one every word's rows are few and
 * cheap to read, and skipping a word there drops the rows that hold only it
 * (a tiny session read too few candidates).
 */
export const COMMON_SKIP_MIN_MESSAGES = 1_000;
/** A word's count is reused this long: counts change slowly, and a stale one only picks the slower plan. */
export const WORD_COUNT_TTL_MS = 60_000;
/** Counts remembered at most; the memo starts over past it. */
const MAX_COUNTED_WORDS = 4_096;

export type RecallPlan = 'session' | 'words';

/** A word's matches as counted: all of them, or `count` and possibly more (counting stopped there). */
interface Counted {
  count: number;
  complete: boolean;
  at: number;
}

/** A word's share of one session's searched messages, as last read. */
interface Share {
  share: number;
  at: number;
}

export class RecallPlanner {
  private readonly counts = new Map<string, Counted>();
  private readonly shares = new Map<string, Share>();

  constructor(
    /** Rows of the whole index matching `match` (one FTS term); counting stops at `cap`. */
    private readonly countMatches: (match: string, cap: number) => number,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * The cheaper plan for a search of `terms` (FTS terms, as `"word"` or
   * `"word"*`) over a session with `compacted` messages to search. Counting
   * stops as soon as the words have WORD_MATCHES_CAP matches.
   */
  plan(terms: readonly string[], compacted: number): RecallPlan {
    if (compacted < WORD_MATCHES_CAP) return 'session';
    let left = WORD_MATCHES_CAP;
    for (const term of terms) {
      left -= this.matchesOf(term, left);
      if (left <= 0) return 'session';
    }
    return 'words';
  }

  /** Whether recall reads `term` (an FTS term) alone, in every session: it is rare in the whole index. */
  rareInIndex(term: string, compacted: number): boolean {
    if (compacted < WORD_MATCHES_CAP) return false;
    return this.matchesOf(term, RARE_WORD_MATCHES) < RARE_WORD_MATCHES;
  }

  /**
   * `term`'s remembered share of the session's `searched` messages, if read
   * in the last WORD_COUNT_TTL_MS and the session is long enough for a
   * common word to be skipped (COMMON_SKIP_MIN_MESSAGES).
   */
  knownShare(sessionId: string, term: string, searched: number): number | undefined {
    if (searched < COMMON_SKIP_MIN_MESSAGES) return undefined;
    const known = this.shares.get(`${sessionId}\u0000${term}`);
    return known !== undefined && this.now() - known.at < WORD_COUNT_TTL_MS
      ? known.share
      : undefined;
  }

  /** Remembers `term`'s share of the session's searched messages, `df` of `searched`. */
  rememberShare(sessionId: string, term: string, df: number, searched: number): void {
    if (this.shares.size >= MAX_COUNTED_WORDS) this.shares.clear();
    this.shares.set(`${sessionId}\u0000${term}`, {
      share: df / Math.max(searched, 1),
      at: this.now(),
    });
  }

  /** `term`'s matches, or `cap` when it has that many or more. */
  private matchesOf(term: string, cap: number): number {
    const at = this.now();
    const known = this.counts.get(term);
    if (known !== undefined && at - known.at < WORD_COUNT_TTL_MS) {
      if (known.complete || known.count >= cap) return Math.min(known.count, cap);
    }
    if (this.counts.size >= MAX_COUNTED_WORDS) this.counts.clear();
    const count = this.countMatches(`content : ${term}`, cap);
    this.counts.set(term, { count, complete: count < cap, at });
    return count;
  }
}
