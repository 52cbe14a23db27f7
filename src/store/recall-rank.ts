/**
 * How the stores rank recall's matches: BM25 over the searched part of the
 * session, computed here rather than by FTS5's bm25() or Postgres' ts_rank
 * (which knows no word's rarity). Postgres uses the final ranking
 * (rankShortlist) on its candidates, with the frequencies of the session's
 * newest messages, so a score means the same on both dialects.
 *
 * FTS5's bm25() takes each word's document frequency from the whole index —
 * every session's messages — and counts it afresh on every query by reading
 * the word's rows in every session; a prefix word ("deploy"*) is read in
 * every session anyway, so the ranked query read each word twice. At 100 000
 * stored messages that was most of a model call's recall, growing with the
 * database. The session is what recall searches, so its own messages are the
 * collection that says whether a word is rare: a word every message of this
 * conversation holds tells nothing here, whatever other sessions say. So:
 *
 * 1. The store reads, once a word, the session's newest searchable rows that
 *    hold it, at most TERM_ROWS_CAP (index only): the word's document
 *    frequency in the session (counted, or estimated from how far back the
 *    capped rows reach), and the rows' first score, the sum of the weights
 *    of the words each holds. A word in most of the session's messages
 *    weighs little and costs no more to read than a word in TERM_ROWS_CAP
 *    of them, so a call's cost does not grow with the session: the rows
 *    that hold a rare word are all read, a common word's newest only.
 * 2. The best SHORTLIST_PER_HIT × `limit` are read, and scored again by full
 *    BM25: each word's count in the text, the row's length against the
 *    shortlist's average.
 * 3. In context (rankInContext): the messages within CONTEXT_SPAN of the best
 *    `limit` are read too, and each message read scores its own BM25 plus
 *    CONTEXT_WEIGHT of its neighbours'. In a conversation the answer seldom
 *    repeats the question's words ("Which team did you sign with?" / "The
 *    Minnesota Wolves!"); the messages around it do. The best `limit` by
 *    that score come back, so a match among other matches ranks above one
 *    alone, and an answer next to its question can rank at all.
 *
 * BM25's constants are FTS5's (k1 1.2, b 0.75); the idf is Lucene's,
 * ln(1 + (N − df + 0.5) / (df + 0.5)), so a word every searched message holds
 * still counts for a little rather than nothing. Pure: the store runs the
 * queries.
 */
import { digitGroups, wordsOf } from './records.js';
import { stemOf } from './stem.js';
import type { RecallPeriod, SearchTerm } from './store.js';

const K1 = 1.2;
const B = 0.75;
/** Rows read and scored with word counts, per hit wanted. */
export const SHORTLIST_PER_HIT = 2;
/** The words a search ranks by, at most: each row keeps which it holds in one 32-bit mask. */
export const MAX_RANKED_TERMS = 30;
/** Rows read per word, newest first: all of a rarer word's, a common word's newest. */
export const TERM_ROWS_CAP = 64;

/**
 * A word's estimated document frequency among `searched` rows when its
 * newest `read` rows reach back over `span` of them: the same density over
 * the whole session (never fewer than were read, never more than searched).
 */
export function estimateFrequency(read: number, span: number, searched: number): number {
  const estimate = Math.round((read * searched) / Math.max(span, 1));
  return Math.min(searched, Math.max(read, estimate));
}

/**
 * A term as an FTS5 expression: a quoted word (stemmed by the index's
 * tokenizer), a prefix starred; a number of four digits or more also as its
 * thousands groups, a phrase ("4500" finds "4,500", which the index splits).
 */
export function ftsTerm(term: SearchTerm): string {
  if (term.prefix) return `"${term.text}"*`;
  const groups = digitGroups(term.text);
  return groups ? `("${term.text}" OR "${groups.join(' ')}")` : `"${term.text}"`;
}

/** BM25's weight of a word held by `df` of `searched` rows. */
export function inverseFrequency(searched: number, df: number): number {
  const n = Math.max(searched, df);
  return Math.log(1 + (n - df + 0.5) / (df + 0.5));
}

/** BM25's share of one word `count` times in a row `chars` long, before its idf. */
export function saturation(count: number, chars: number, averageChars: number): number {
  const norm = 1 - B + (B * chars) / Math.max(averageChars, 1);
  return (count * (K1 + 1)) / (count + K1 * norm);
}

/** A row picked for reading, and which of the words the index found in it (bit i: word i). */
export interface Picked {
  id: number;
  held: number;
}

/**
 * The words' weights, and the rows to read: the best `size` by the sum of
 * the weights of the words they hold. `holding[i]` lists the searchable rows
 * (ids) read that hold word i, of `searched` rows in all; `frequencies[i]`
 * is word i's document frequency when more rows hold it than were read
 * (default: the rows listed). Ties go to the earlier message (the smaller
 * id: a session's ids grow with its seq). At most MAX_RANKED_TERMS words.
 */
export function shortlist(
  holding: readonly (readonly number[])[],
  searched: number,
  size: number,
  frequencies: readonly number[] = holding.map((rows) => rows.length),
): { weights: number[]; picked: Picked[] } {
  if (holding.length > MAX_RANKED_TERMS) throw new RangeError('too many words to rank');
  const slotOf = new Map<number, number>();
  const ids: number[] = [];
  const sums: number[] = [];
  const held: number[] = [];
  const weights = holding.map((rows, word) => {
    const weight = inverseFrequency(searched, frequencies[word] ?? rows.length);
    for (const id of rows) {
      let slot = slotOf.get(id);
      if (slot === undefined) {
        slot = ids.length;
        slotOf.set(id, slot);
        ids.push(id);
        sums.push(0);
        held.push(0);
      }
      sums[slot]! += weight;
      held[slot]! |= 1 << word;
    }
    return weight;
  });
  const better = (a: number, b: number): boolean =>
    sums[a]! > sums[b]! || (sums[a] === sums[b] && ids[a]! < ids[b]!);
  const picked = best(ids.length, size, better).map((slot) => ({
    id: ids[slot]!,
    held: held[slot]!,
  }));
  return { weights, picked };
}

/**
 * The `size` best of slots 0 … `count` − 1, best first: one pass keeping the
 * best so far in order, so a long session's thousands of matches are never
 * sorted to take a few dozen.
 */
function best(count: number, size: number, better: (a: number, b: number) => boolean): number[] {
  const kept: number[] = [];
  if (size <= 0) return kept;
  for (let slot = 0; slot < count; slot++) {
    const full = kept.length === size;
    if (full && !better(slot, kept[size - 1]!)) continue;
    let at = full ? size - 1 : kept.length;
    while (at > 0 && better(slot, kept[at - 1]!)) {
      kept[at] = kept[at - 1]!;
      at -= 1;
    }
    kept[at] = slot;
  }
  return kept;
}

/** How many times each of `terms` occurs in `text`, as recall's words are split and folded. */
export function termCounts(terms: readonly SearchTerm[], text: string): number[] {
  const counts = terms.map(() => 0);
  // matchesTerm, with each stem looked up once rather than once a pair.
  const stems = terms.map((term) => (term.prefix ? '' : stemOf(term.text)));
  for (const word of wordsOf(text)) {
    const stem = stemOf(word);
    terms.forEach((term, i) => {
      const match = term.prefix
        ? word.startsWith(term.text)
        : word === term.text || stem === stems[i];
      if (match) counts[i]! += 1;
    });
  }
  return counts;
}

/** A shortlisted row as read: `chars` is the whole message's length, `content` maybe clipped. */
export interface ReadRow {
  seq: number;
  content: string;
  chars: number;
  held: number;
  /** termCounts of the ranked terms in `content`, when already counted for the same terms. */
  counts?: readonly number[];
}

/** Messages on each side of a ranked one read for its context. */
export const CONTEXT_SPAN = 2;
/** The share of each neighbour's own score (within CONTEXT_SPAN) a message adds to its own. */
export const CONTEXT_WEIGHT = 0.3;

/**
 * Each row's own BM25: each word's count in the row's text, the row's
 * length against the rows' average. A word the index found in the row
 * counts at least once, though the text read may not show it (a long
 * message is clipped; the index splits a word at `_`). With it, which of
 * the words the row holds (bit i: word i).
 */
function ownScores(
  rows: readonly ReadRow[],
  terms: readonly SearchTerm[],
  weights: readonly number[],
): { score: number; holds: number }[] {
  const average = rows.reduce((sum, row) => sum + row.chars, 0) / Math.max(rows.length, 1);
  return rows.map((row) => {
    let score = 0;
    let holds = 0;
    (row.counts ?? termCounts(terms, row.content)).forEach((count, i) => {
      const seen = Math.max(count, (row.held >>> i) & 1);
      if (seen > 0) holds |= 1 << i;
      score += weights[i]! * saturation(seen, row.chars, average);
    });
    return { score, holds };
  });
}

/** The best `limit` of `rows` by `scores`, with their scores; ties go to the earlier message. */
function bestBy<R extends ReadRow>(
  rows: readonly R[],
  scores: readonly number[],
  limit: number,
): (R & { score: number })[] {
  const scored = rows.map((row, i) => ({ row, score: scores[i]! }));
  scored.sort((a, b) => b.score - a.score || a.row.seq - b.row.seq);
  return scored.slice(0, limit).map((s) => ({ ...s.row, score: s.score }));
}

/**
 * `rows` (the shortlist, read) best first by full BM25, at most `limit`.
 * Ties go to the earlier message.
 */
export function rankShortlist<R extends ReadRow>(
  rows: readonly R[],
  terms: readonly SearchTerm[],
  weights: readonly number[],
  limit: number,
): (R & { score: number })[] {
  return bestBy(
    rows,
    ownScores(rows, terms, weights).map((own) => own.score),
    limit,
  );
}

/**
 * The seqs to read for the context of `ranked` (the best of the shortlist):
 * those within CONTEXT_SPAN of each, from 1 to `maxSeq`, that are not read
 * already (`read`). Ascending.
 */
export function contextSeqs(
  ranked: readonly number[],
  read: ReadonlySet<number>,
  maxSeq: number,
): number[] {
  const wanted = new Set<number>();
  for (const seq of ranked) {
    for (let d = -CONTEXT_SPAN; d <= CONTEXT_SPAN; d++) {
      const at = seq + d;
      if (at >= 1 && at <= maxSeq && !read.has(at)) wanted.add(at);
    }
  }
  return [...wanted].sort((a, b) => a - b);
}

/** How much more a message written in the period the question names scores (its own score). */
export const PERIOD_WEIGHT = 2;

function within(createdAt: string, period: RecallPeriod): boolean {
  const at = Date.parse(createdAt);
  return at >= period.from && at < period.to;
}

/**
 * `rows` (the shortlist and the messages around its best, read) best first
 * by their score in context, at most `limit`: each row's own BM25 (times
 * PERIOD_WEIGHT when it was written within `period`, the day, month or year
 * the question names) plus CONTEXT_WEIGHT of the own score of each row read
 * within CONTEXT_SPAN of it (a seq not read, a system message or one past
 * the pointer, adds nothing). Only rows that hold one of the `evidence`
 * words (default: any word) come back. Ties go to the earlier message.
 */
export function rankInContext<R extends ReadRow & { created_at: string }>(
  rows: readonly R[],
  terms: readonly SearchTerm[],
  weights: readonly number[],
  limit: number,
  options: { evidence?: readonly boolean[]; period?: RecallPeriod } = {},
): (R & { score: number })[] {
  const { evidence, period } = options;
  const scored = ownScores(rows, terms, weights);
  const own = scored.map(({ score }, i) =>
    period && within(rows[i]!.created_at, period) ? score * PERIOD_WEIGHT : score,
  );
  const ownAt = new Map(rows.map((row, i) => [row.seq, own[i]!]));
  const evidenceMask = (evidence ?? terms.map(() => true)).reduce(
    (mask, is, i) => (is ? mask | (1 << i) : mask),
    0,
  );
  // A row without an evidence word gives context, it is no match.
  const matching: R[] = [];
  const scores: number[] = [];
  rows.forEach((row, i) => {
    if ((scored[i]!.holds & evidenceMask) === 0) return;
    let score = own[i]!;
    for (let d = 1; d <= CONTEXT_SPAN; d++) {
      score += CONTEXT_WEIGHT * ((ownAt.get(row.seq - d) ?? 0) + (ownAt.get(row.seq + d) ?? 0));
    }
    matching.push(row);
    scores.push(score);
  });
  return bestBy(matching, scores, limit);
}
