/**
 * Typo tolerance for recall without a model: the words the history holds
 * (`history_words`, migration 023), so a query word that no stored message
 * holds ("kubernets", "recieve", "postgress") is searched as the known word
 * one edit away ("kubernetes", "receive", "postgres"), or two for a long word.
 *
 * The vocabulary is one table for the whole database, one row per distinct
 * word (letters only, MIN_VOCABULARY_CHARS to MAX_VOCABULARY_CHARS long) with
 * its Porter stem and the number of messages that held it when indexed. It
 * grows with the language of the conversations, not with their length: a
 * hundred thousand messages of chat hold some tens of thousands of words.
 * Candidates are found by deletion keys (each stored word under itself and
 * every one-letter deletion of it; a query word looks up its own deletions,
 * and two-letter deletions when it is long): one indexed read of at most a few
 * hundred keys, whatever the history's length. Postgres looks the candidates
 * up with `pg_trgm` instead when the extension can be created. Every
 * candidate is checked by its edit distance here, so both ways correct alike.
 *
 * A word is corrected only when it is MIN_TYPO_CHARS long or more, and its
 * stem is held by fewer than RARE_EXACT messages while the candidate is held
 * by CORRECTION_LEAD times more, and when the candidate starts with the same
 * letter: a short word has too many neighbours, a word the history does hold
 * is what the user meant, and a misspelling seldom changes the first letter.
 * Pure: no I/O.
 */
import { foldWord } from './records.js';
import { stemOf } from './stem.js';

/** Query words shorter than this are never corrected. */
export const MIN_TYPO_CHARS = 5;
/** Stored words this long or longer (a five-letter typo may be a four-letter word plus one). */
export const MIN_VOCABULARY_CHARS = 4;
/** Longer words are not stored: ids and pasted tokens, not words one misspells. */
export const MAX_VOCABULARY_CHARS = 24;
/** From this length a query word may be two edits from the stored word. */
export const LONG_WORD_CHARS = 8;
/** A query word whose stem fewer messages than this hold may be corrected. */
export const RARE_EXACT = 2;
/** The correction must be held by this many times more messages than the word itself. */
export const CORRECTION_LEAD = 5;
/** Messages read into the vocabulary per batch (one short transaction each). */
export const VOCABULARY_BATCH = 2_000;
/** Candidates read per query word, at most (the most common first). */
export const MAX_CANDIDATES = 64;

/** A stored word: its text, its stem and how many messages held it. */
export interface KnownWord {
  word: string;
  stem: string;
  messages: number;
}

/** The distinct words of a message the vocabulary stores. */
export function vocabularyWords(text: string): string[] {
  const out = new Set<string>();
  for (const raw of text.match(/\p{L}+/gu) ?? []) {
    const word = foldWord(raw);
    if (word.length < MIN_VOCABULARY_CHARS || word.length > MAX_VOCABULARY_CHARS) continue;
    if (!/^[a-z]+$/.test(word)) continue;
    out.add(word);
  }
  return [...out];
}

/** The words of a batch of messages with the number of messages holding each. */
export function countWords(contents: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const content of contents) {
    for (const word of vocabularyWords(content)) counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  return counts;
}

/** `word` and each of its one-letter deletions: the keys a stored word is found under. */
export function deletionKeys(word: string): string[] {
  const keys = new Set([word]);
  for (let i = 0; i < word.length; i++) keys.add(word.slice(0, i) + word.slice(i + 1));
  return [...keys];
}

/** The keys a query word looks up: its deletions, two deep for a long word. */
export function queryKeys(word: string): string[] {
  const keys = new Set(deletionKeys(word));
  if (maxDistance(word) >= 2) {
    for (const once of deletionKeys(word)) {
      if (once.length < word.length) for (const twice of deletionKeys(once)) keys.add(twice);
    }
  }
  return [...keys];
}

/** The edits a query word may be from its correction. */
export function maxDistance(word: string): number {
  return word.length >= LONG_WORD_CHARS ? 2 : 1;
}

/** Whether a query word is one recall may correct: letters only, long enough. */
export function mayCorrect(word: string): boolean {
  return (
    word.length >= MIN_TYPO_CHARS && word.length <= MAX_VOCABULARY_CHARS && /^[a-z]+$/.test(word)
  );
}

/**
 * The edit distance of `a` and `b` counting an insertion, a deletion, a
 * substitution or a swap of two neighbours as one edit ("recieve" is one from
 * "receive"); any distance above `limit` is returned as `limit + 1`.
 */
export function editDistance(a: string, b: string, limit: number): number {
  if (Math.abs(a.length - b.length) > limit) return limit + 1;
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let d = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d = Math.min(d, before[j - 2]! + 1);
      }
      row.push(d);
      best = Math.min(best, d);
    }
    if (best > limit) return limit + 1;
    before = previous;
    previous = row;
  }
  return Math.min(previous[b.length]!, limit + 1);
}

/**
 * The word `word` is corrected to, if any: of the `candidates` within its
 * edit distance, the closest, then the most held; none when the word's stem
 * (`held` messages hold it) is common enough, or when the candidate's stem is
 * the word's own (the stem already finds it). The correction starts with the
 * word's first letter: a misspelling seldom changes it, and two edits at the
 * start turn a word into an unrelated one ("studying" into "tidying").
 */
export function correctionOf(
  word: string,
  held: number,
  candidates: readonly KnownWord[],
): string | undefined {
  if (!mayCorrect(word) || held >= RARE_EXACT) return undefined;
  const stem = stemOf(word);
  const limit = maxDistance(word);
  let best: { word: string; distance: number; messages: number } | undefined;
  for (const candidate of candidates) {
    if (
      candidate.stem === stem ||
      candidate.messages < Math.max(1, held * CORRECTION_LEAD) ||
      candidate.word[0] !== word[0]
    ) {
      continue;
    }
    const distance = editDistance(word, candidate.word, limit);
    if (distance > limit) continue;
    if (
      best === undefined ||
      distance < best.distance ||
      (distance === best.distance && candidate.messages > best.messages) ||
      (distance === best.distance &&
        candidate.messages === best.messages &&
        candidate.word < best.word)
    ) {
      best = { word: candidate.word, distance, messages: candidate.messages };
    }
  }
  return best?.word;
}
