/**
 * The link checker's parts: the links of a markdown file (outside code), the
 * anchors its headings make under GitHub's slug rules, and what a relative
 * link points at. The docs test (doc-links.test.ts) puts them together.
 */
import { dirname, join, normalize } from 'node:path';

export interface MarkdownLink {
  /** 1-based line of the link. */
  line: number;
  target: string;
}

/** The markdown lines with fenced code blanked out (line numbers kept). */
function proseLines(markdown: string): string[] {
  let fence: string | null = null;
  return markdown.split('\n').map((line) => {
    const opening = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence === null) {
      if (opening) {
        fence = opening[1]!;
        return '';
      }
      return line;
    }
    if (opening && opening[1]!.startsWith(fence) && line.trim() === opening[1]) fence = null;
    return '';
  });
}

/** Inline code spans are not links: `[x](y)` in backticks is text. */
function withoutInlineCode(line: string): string {
  return line.replace(/(`+)[^`]*?\1/g, (span) => ' '.repeat(span.length));
}

/** Every inline link and image (`[text](target)`, `![alt](target)`) and reference definition. */
export function markdownLinks(markdown: string): MarkdownLink[] {
  const links: MarkdownLink[] = [];
  proseLines(markdown).forEach((raw, index) => {
    const line = withoutInlineCode(raw);
    for (const match of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      links.push({ line: index + 1, target: match[1]! });
    }
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/.exec(line);
    if (definition) links.push({ line: index + 1, target: definition[1]! });
  });
  return links;
}

/** A heading's text as GitHub renders it: code, links, emphasis and HTML reduced to their text. */
function renderedText(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/<[^>]+>/g, '')
    .replace(/`/g, '')
    .replace(/(\*\*|__|\*)/g, '')
    .trim();
}

/**
 * GitHub's slug of a heading (github-slugger): lower case, every character
 * that is not a letter, mark, number, connector (`_`), space or hyphen
 * dropped, spaces made hyphens. Repeats get `-1`, `-2`, … in `seen`.
 */
export function githubSlug(heading: string, seen: Map<string, number> = new Map()): string {
  const base = renderedText(heading)
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
  const count = seen.get(base);
  seen.set(base, (count ?? -1) + 1);
  return count === undefined ? base : `${base}-${count + 1}`;
}

/** The anchors a markdown file offers: its headings' slugs and any `<a id|name="…">`. */
export function markdownAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(markdown)) {
    const heading = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) anchors.add(githubSlug(heading[1]!, seen));
    for (const html of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(html[1]!);
  }
  return anchors;
}

/** Links to other sites (and mail) are not checked here: only the repository's own files. */
export function isExternal(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target);
}

/**
 * Where a relative link from `fromFile` (a path from the repository root)
 * points: the file (from the root; `fromFile` itself for `#anchor`) and the
 * anchor, if any.
 */
export function resolveLink(fromFile: string, target: string): { file: string; anchor?: string } {
  const hash = target.indexOf('#');
  const path = hash === -1 ? target : target.slice(0, hash);
  const anchor = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const file =
    path === '' ? fromFile : normalize(join(dirname(fromFile), decodeURIComponent(path)));
  return anchor === undefined ? { file } : { file, anchor };
}
