/**
 * Which recalled message gives a newer value for the same thing as an older
 * one in the same block ("the gate code is 4812" … "the gate code is now
 * 7731"). Both come back when both match; without a mark the model has to
 * guess which still holds. Pure.
 *
 * Two messages speak of the same thing when they hold the same query terms
 * (at least two of them, or the only one of a one-term query); they state
 * different values when each holds a value the other lacks. A value is a
 * token with a digit in it (a number, a code, a version, a path with a
 * number), its thousands separators removed so "4,500" and "4500" are one.
 */
import { matchesTerm, wordsOf } from '../store/records.js';
import type { RecalledItem } from './recall-block.js';
import type { RecallTerm } from './recall-query.js';

const VALUE = /[\p{L}\p{N}_./:-]*\p{N}[\p{L}\p{N}_./:-]*/gu;

/** The values `text` states: its tokens with a digit, folded, separators of thousands dropped. */
export function valuesOf(text: string): Set<string> {
  const out = new Set<string>();
  for (const match of text.matchAll(VALUE)) {
    const token = match[0]
      .toLowerCase()
      .replace(/(\d)[,.](?=\d{3}\b)/g, '$1')
      .replace(/[.:-]+$/, '');
    if (token !== '') out.add(token);
  }
  return out;
}

/** Indexes of the query terms `text` holds. */
function subjectOf(terms: readonly RecallTerm[], text: string): Set<number> {
  const words = new Set(wordsOf(text));
  const held = new Set<number>();
  terms.forEach((term, i) => {
    for (const word of words) {
      if (matchesTerm(term, word)) {
        held.add(i);
        return;
      }
    }
  });
  return held;
}

function differs(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  return [...a].some((value) => !b.has(value));
}

/**
 * `items` (oldest first) with `supersedes` set on each message that states
 * another value for the same thing as an older one of them: the seq of the
 * nearest such older message.
 */
export function markSuperseded(
  items: readonly RecalledItem[],
  terms: readonly RecallTerm[],
): RecalledItem[] {
  const needed = Math.min(2, terms.length);
  if (needed === 0) return [...items];
  const facts = items.map((item) => ({
    subject: subjectOf(terms, item.text),
    values: valuesOf(item.text),
  }));
  return items.map((item, i) => {
    const newer = facts[i]!;
    if (newer.values.size === 0 || newer.subject.size < needed) return item;
    for (let j = i - 1; j >= 0; j--) {
      const older = facts[j]!;
      const shared = [...newer.subject].filter((t) => older.subject.has(t)).length;
      if (shared < needed || older.values.size === 0) continue;
      if (differs(newer.values, older.values) && differs(older.values, newer.values)) {
        return { ...item, supersedes: items[j]!.seq };
      }
    }
    return item;
  });
}
