/**
 * What a compaction dropped: the details of the folded messages that a
 * summary most often loses — identifiers, numbers, dates, quoted strings and
 * capitalised names — which the new summary does not contain. Found without a
 * model (pure text matching), so it costs nothing per compaction and can be
 * shown to a person beside the summary. Pure.
 */

import { MAX_DROPPED_ITEMS, type DroppedItem } from '../store/store.js';

export { MAX_DROPPED_ITEMS };

/** What kind of detail a dropped item is. */
export type DroppedKind = DroppedItem['kind'];

/** Longer matches (a quoted paragraph, a long URL) are not worth listing. */
const MAX_ITEM_CHARS = 120;

/** Kinds in the order they are kept when there are more than MAX_DROPPED_ITEMS. */
const PRIORITY: readonly DroppedKind[] = ['identifier', 'number', 'date', 'quote', 'name'];

const MONTH =
  'Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?';

/** Matchers in the order they claim text: a date is not also a number. */
const MATCHERS: readonly { kind: DroppedKind; pattern: RegExp }[] = [
  {
    kind: 'date',
    pattern: new RegExp(
      String.raw`\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b(?:${MONTH})\.? \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?\b|\b\d{1,2} (?:${MONTH}) \d{4}\b`,
      'g',
    ),
  },
  { kind: 'quote', pattern: /"([^"\n]{3,120})"|“([^”\n]{3,120})”|`([^`\n]{3,120})`/g },
  {
    kind: 'identifier',
    pattern:
      /https?:\/\/[^\s"'<>`)]+|(?<![\w./-])(?=[\w./-]*[A-Za-z])(?=[\w./-]*[\d_])[A-Za-z\d][\w./-]*[A-Za-z\d](?![\w-])/g,
  },
  {
    kind: 'number',
    pattern: /(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\w])|(?<![\w.,])\d{2,}(?:\.\d+)?(?![\w])/g,
  },
  {
    kind: 'name',
    // Capitalised words after a lower-case word (so not just a sentence's first word).
    pattern: /(?<=[a-z,;:] )[A-Z][a-z]+(?: [A-Z][a-z]+)*/g,
  },
];

/** Lower case, without the separators a number may be written with. */
function normalise(text: string): string {
  return text.toLowerCase();
}

/** Whether `summary` (normalised) still holds `item`, in its own or a plain-number spelling. */
function kept(summary: string, summaryDigits: string, item: DroppedItem): boolean {
  const text = normalise(item.text);
  if (summary.includes(text)) return true;
  if (item.kind === 'number') return summaryDigits.includes(text.replace(/,/g, ''));
  return false;
}

/**
 * The details of `folded` (the messages a compaction folds, with their seqs)
 * that `summary` does not contain, at most MAX_DROPPED_ITEMS, in seq order;
 * when there are more, identifiers, numbers and dates are kept before quotes
 * and names. Each text is listed once.
 */
export function findDropped(
  folded: readonly { seq: number; text: string }[],
  summary: string,
): DroppedItem[] {
  const summaryText = normalise(summary);
  const summaryDigits = summaryText.replace(/(\d),(?=\d{3})/g, '$1');
  const seen = new Set<string>();
  const found: DroppedItem[] = [];
  for (const message of folded) {
    let text = message.text;
    for (const { kind, pattern } of MATCHERS) {
      for (const match of text.matchAll(pattern)) {
        const value = (match[1] ?? match[2] ?? match[3] ?? match[0]).trim();
        if (value.length === 0 || value.length > MAX_ITEM_CHARS) continue;
        const key = normalise(value);
        if (seen.has(key)) continue;
        seen.add(key);
        const item: DroppedItem = { text: value, kind, seq: message.seq };
        if (!kept(summaryText, summaryDigits, item)) found.push(item);
      }
      // What one kind matched is not matched again by the next (a date's digits are no number).
      text = text.replace(pattern, (whole) => ' '.repeat(whole.length));
    }
  }
  if (found.length <= MAX_DROPPED_ITEMS) return found;
  return found
    .map((item, order) => ({ item, order }))
    .sort(
      (a, b) => PRIORITY.indexOf(a.item.kind) - PRIORITY.indexOf(b.item.kind) || a.order - b.order,
    )
    .slice(0, MAX_DROPPED_ITEMS)
    .sort((a, b) => a.order - b.order)
    .map(({ item }) => item);
}
