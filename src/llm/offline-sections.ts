/**
 * The offline model's extractive summary in sections: the previous summary
 * is parsed and edited in place, each new transcript line is sorted into a
 * section by plain keyword rules (instructions, decisions, open items,
 * goals, tool results; facts are lines with numbers, ids or names), and a
 * statement about something already listed ("the caretaker of the marina
 * is …") replaces the item it updates. Verbatim, clipped per line. Pure.
 */
import {
  capSections,
  emptySections,
  parseSections,
  renderSections,
  type SectionedSummary,
  type SummarySection,
} from '../compaction/summary-sections.js';

const ITEM_CHARS = 220;
const ENTRY = /^\[(?:#(\d+) )?(user|assistant|tool|system)(?: \(([^)]*)\))?\]\s?(.*)$/;

const RULES: readonly [SummarySection, RegExp][] = [
  [
    'Instructions and preferences',
    /\b(always|never|whenever|from now on|standing instruction|i prefer|prefer|please do not|don't ever|remember to)\b/i,
  ],
  ['Decisions', /\b(decision|decided|decide|we chose|chose|agreed|settled on|go with)\b/i],
  [
    'Open items',
    /\b(todo|to-do|open question|next step|still need|follow up|remind me|pending)\b/i,
  ],
  ['Goal', /\b(my goal|our goal|the goal|i want to|i am trying to|i'm trying to|objective)\b/i],
];

/** A line worth keeping as a fact: a number, an id, or a name in the middle of a sentence. */
function isFactLine(line: string): boolean {
  return /\d/.test(line) || /\s\p{Lu}[\p{L}-]+/u.test(line) || /\b[A-Z]{2,}[-_]?\w*\b/.test(line);
}

function clip(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= ITEM_CHARS ? flat : `${flat.slice(0, ITEM_CHARS - 1)}…`;
}

/** What a statement is about: the few words before " is " ("caretaker of the marina"). */
function subjectOf(item: string): string | undefined {
  const match = /(?:^|\s)((?:\S+\s+){0,3}\S+)\s+(?:is|are)\s/i.exec(
    item.replace(/\s*\(#\d+\)$/, ''),
  );
  return match?.[1]?.toLowerCase().replace(/^(the|a|an)\s+/, '');
}

function bare(item: string): string {
  return item.replace(/\s*\(#\d+\)$/, '');
}

/** Adds `item` to `section`, replacing an item about the same subject; skips exact repeats. */
function put(summary: SectionedSummary, section: SummarySection, item: string): void {
  const items = summary[section];
  if (items.some((existing) => bare(existing) === bare(item))) return;
  const subject = section === 'Facts and figures' ? subjectOf(item) : undefined;
  if (subject !== undefined) {
    const at = items.findIndex((existing) => subjectOf(existing) === subject);
    if (at >= 0) {
      items[at] = item;
      return;
    }
  }
  items.push(item);
}

function sectionOf(role: string, line: string): SummarySection | undefined {
  if (role === 'tool') return 'Tool results relied on';
  for (const [section, pattern] of RULES) if (pattern.test(line)) return section;
  return isFactLine(line) ? 'Facts and figures' : undefined;
}

/**
 * The updated sections for a previous summary (any text; a prose one is kept
 * as facts) and the summariser's transcript lines, under `maxChars`.
 */
export function extractSections(input: {
  previous: string;
  transcript: string;
  maxChars: number;
  /** Lines to leave out (the offline model's own canned replies). */
  skip: (line: string) => boolean;
}): string {
  const summary = parseSections(input.previous) ?? emptySections();
  if (!parseSections(input.previous)) {
    for (const line of input.previous.split('\n')) {
      const item = clip(line.replace(/^[-*]\s+/, ''));
      if (item !== '' && !input.skip(item)) put(summary, 'Facts and figures', item);
    }
  }
  let role = 'user';
  let seq: string | undefined;
  let name: string | undefined;
  let firstOfEntry = true;
  for (const raw of input.transcript.split('\n')) {
    const entry = ENTRY.exec(raw);
    let line = raw;
    if (entry) {
      [, seq, role = 'user', name] = entry;
      line = entry[4] ?? '';
      firstOfEntry = true;
    }
    const text = line.trim();
    if (text === '' || input.skip(text)) continue;
    const section = sectionOf(role, text);
    // One line per tool result: its head is what later turns lean on.
    if (section === 'Tool results relied on' && !firstOfEntry) continue;
    firstOfEntry = false;
    if (section === undefined) continue;
    const label = section === 'Tool results relied on' && name ? `${name}: ` : '';
    put(summary, section, `${label}${clip(text)}${seq !== undefined ? ` (#${seq})` : ''}`);
  }
  return capSections(renderSections(summary), input.maxChars) ?? renderSections(emptySections());
}
