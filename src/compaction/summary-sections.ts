/**
 * The structured summary: fixed sections that each rolling compaction edits
 * in place (the previous summary is the document being updated, not context
 * to paraphrase). Parsing, rendering and the size cap are pure, and shared
 * by the summariser's prompt, the cap on what a model returns, and the
 * offline model's extractive summaries.
 *
 * The document is Markdown: one `## Heading` per section, in this order,
 * each followed by `- item` lines (`- none` when empty).
 */

export const SUMMARY_SECTIONS = [
  'Goal',
  'Instructions and preferences',
  'Decisions',
  'Facts and figures',
  'Open items',
  'Tool results relied on',
] as const;

export type SummarySection = (typeof SUMMARY_SECTIONS)[number];
export type SectionedSummary = Record<SummarySection, string[]>;

export const EMPTY_ITEM = 'none';

/** When space runs short, items are dropped from these sections first, oldest first. */
const DROP_ORDER: readonly SummarySection[] = [
  'Tool results relied on',
  'Facts and figures',
  'Open items',
  'Decisions',
  'Goal',
  'Instructions and preferences',
];

export function emptySections(): SectionedSummary {
  return Object.fromEntries(SUMMARY_SECTIONS.map((s) => [s, [] as string[]])) as SectionedSummary;
}

export function renderSections(summary: SectionedSummary): string {
  return SUMMARY_SECTIONS.map((section) => {
    const items = summary[section];
    const lines = items.length > 0 ? items.map((item) => `- ${item}`) : [`- ${EMPTY_ITEM}`];
    return [`## ${section}`, ...lines].join('\n');
  }).join('\n\n');
}

/** The empty document a first compaction fills in. */
export const EMPTY_SECTIONS_DOCUMENT = renderSections(emptySections());

/**
 * The sections of a summary written in this format; undefined when the text
 * has none of the headings (a prose summary, or an older one). Text outside
 * any known heading is kept under "Facts and figures".
 */
export function parseSections(text: string): SectionedSummary | undefined {
  const out = emptySections();
  let current: SummarySection | undefined;
  let found = false;
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const heading = /^#{1,6}\s+(.+?)\s*:?$/.exec(line)?.[1];
    const known = SUMMARY_SECTIONS.find((s) => s.toLowerCase() === heading?.toLowerCase());
    if (known) {
      current = known;
      found = true;
      continue;
    }
    const item = line.replace(/^[-*]\s+/, '');
    if (item.toLowerCase() === EMPTY_ITEM) continue;
    out[current ?? 'Facts and figures'].push(item);
  }
  return found ? out : undefined;
}

/**
 * Keeps a sectioned summary under `maxChars` by dropping whole items, the
 * oldest first, from the least precious sections first; the headings stay.
 * Undefined when the text is not sectioned or even the headings do not fit.
 */
export function capSections(text: string, maxChars: number): string | undefined {
  const sections = parseSections(text);
  if (!sections) return undefined;
  let rendered = renderSections(sections);
  for (const section of DROP_ORDER) {
    while (rendered.length > maxChars && sections[section].length > 0) {
      sections[section].shift();
      rendered = renderSections(sections);
    }
  }
  return rendered.length <= maxChars ? rendered : undefined;
}
