/**
 * Every relative link in README.md, ARCHITECTURE.md and the guide points at a
 * file that exists and, when it names an `#anchor`, at a heading that file has
 * under GitHub's slug rules (or an `<a id>`), as a reader clicking it on
 * GitHub would find. Links to other sites are not fetched. A link that says
 * "chapter N" leads to chapter N, and no table has a second row of dashes
 * (which renders as a row of dashes, not as a rule). Commands are in `sh` or
 * `bash` fences, the ones the docs test runs (or skips with a reason).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  githubSlug,
  isExternal,
  markdownAnchors,
  markdownLinks,
  resolveLink,
} from './markdown-links.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const FILES = [
  'README.md',
  'ARCHITECTURE.md',
  ...readdirSync(join(ROOT, 'docs/guide'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/guide/${name}`),
];

describe('GitHub heading slugs', () => {
  it('lower-case, drop punctuation, keep underscores and hyphens, number repeats', () => {
    const seen = new Map<string, number>();
    expect(githubSlug('Model roles: `main` and `compact`', seen)).toBe(
      'model-roles-main-and-compact',
    );
    expect(githubSlug('Costs (and pricing)', seen)).toBe('costs-and-pricing');
    expect(githubSlug('`tool_choice` & **friends**', seen)).toBe('tool_choice--friends');
    expect(githubSlug('[Link](x.md) text — dash', seen)).toBe('link-text--dash');
    expect(githubSlug('Costs (and pricing)', seen)).toBe('costs-and-pricing-1');
    expect(githubSlug('Costs (and pricing)', seen)).toBe('costs-and-pricing-2');
  });
});

describe('markdown links', () => {
  it('finds inline links, images and definitions, not code', () => {
    const md = [
      'See [a](a.md#x) and ![img](i.png "title"), not `[b](b.md)`.',
      '```md',
      '[c](c.md)',
      '```',
      '[d]: d.md#y',
    ].join('\n');
    expect(markdownLinks(md)).toEqual([
      { line: 1, target: 'a.md#x' },
      { line: 1, target: 'i.png' },
      { line: 5, target: 'd.md#y' },
    ]);
  });

  it('resolves a link from its file', () => {
    expect(resolveLink('docs/guide/09-security.md', '15-observing-cairn.md#costs')).toEqual({
      file: 'docs/guide/15-observing-cairn.md',
      anchor: 'costs',
    });
    expect(resolveLink('docs/guide/README.md', '../../README.md#http-api')).toEqual({
      file: 'README.md',
      anchor: 'http-api',
    });
    expect(resolveLink('README.md', '#install-notes')).toEqual({
      file: 'README.md',
      anchor: 'install-notes',
    });
  });
});

describe('the docs links', () => {
  it('point at files that exist and at anchors those files have', () => {
    const anchorsOf = new Map<string, Set<string>>();
    const broken: string[] = [];
    for (const file of FILES) {
      for (const link of markdownLinks(readFileSync(join(ROOT, file), 'utf8'))) {
        if (isExternal(link.target)) continue;
        const where = `${file}:${link.line} → ${link.target}`;
        const target = resolveLink(file, link.target);
        const path = join(ROOT, target.file);
        if (!existsSync(path)) {
          broken.push(`${where}: no such file`);
          continue;
        }
        if (target.anchor === undefined) continue;
        if (statSync(path).isDirectory() || !target.file.endsWith('.md')) {
          broken.push(`${where}: an anchor into something that is not markdown`);
          continue;
        }
        let anchors = anchorsOf.get(target.file);
        if (!anchors) {
          anchors = markdownAnchors(readFileSync(path, 'utf8'));
          anchorsOf.set(target.file, anchors);
        }
        if (!anchors.has(target.anchor)) broken.push(`${where}: no such heading`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('that say "chapter N" lead to chapter N', () => {
    const wrong: string[] = [];
    for (const file of FILES) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const match of text.matchAll(/\[chapter (\d+)\]\((?:[^)#]*\/)?(\d+)-[^)]*\)/gi)) {
        if (Number(match[1]) !== Number(match[2])) wrong.push(`${file}: ${match[0]}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});

describe('the docs tables', () => {
  it('have one row of dashes, under the header', () => {
    const DASHES = /^\|(\s*:?-{3,}:?\s*\|)+\s*$/;
    const extra: string[] = [];
    for (const file of FILES) {
      const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (DASHES.test(line) && i > 0 && DASHES.test(lines[i - 1]!)) {
          extra.push(`${file}:${i + 1}`);
        }
      });
    }
    expect(extra).toEqual([]);
  });
});

/** A line a reader types: a command Cairn's docs use, or a variable set for one. */
const COMMAND = /^(curl|cairn|npm|npx|node|docker|export|mkdir|cat|cd)\s|^[A-Z][A-Z0-9_]*=\S/;

describe('the docs commands', () => {
  it('are in sh or bash fences', () => {
    const elsewhere: string[] = [];
    for (const file of FILES) {
      const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
      for (let i = 0; i < lines.length; i++) {
        const fence = /^\s*```(\w*)\s*$/.exec(lines[i]!);
        if (!fence) continue;
        const end = lines.findIndex((line, j) => j > i && /^\s*```\s*$/.test(line));
        const first = lines.slice(i + 1, end).find((line) => line.trim() !== '');
        // Fences of program code (js, ts, json…) are not for a terminal.
        const forText = ['', 'text', 'console', 'shell'].includes(fence[1]!);
        if (forText && first && COMMAND.test(first.trim())) {
          elsewhere.push(`${file}:${i + 1} (${fence[1] || 'no language'}): ${first.trim()}`);
        }
        i = end;
      }
    }
    expect(elsewhere).toEqual([]);
  });
});
