/**
 * The repository explains itself: no source file, test, script or doc cites a
 * document a clone does not have (a design or reliability list kept outside
 * the repository, an issue tracker's number, a section sign into a spec
 * nobody ships). A comment that needs a reason says the reason. A citation is
 * fine when it names a file the repository contains, and public standards
 * (`RFC 9110 §11.1`) are fine too: anyone can read them.
 *
 * The patterns are put together from pieces, so this file never matches them.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Folders walked, and the files at the root that hold comments or prose. */
const FOLDERS = [
  'src',
  'test',
  'bench',
  'scripts',
  'console/src',
  'console/test',
  'docs',
  'agents',
];
const ROOT_FILES = [
  'README.md',
  'ARCHITECTURE.md',
  'eslint.config.js',
  'stryker.config.mjs',
  'vitest.config.ts',
  'vitest.fast.config.ts',
  'vitest.mutate.config.ts',
  'console/vite.config.ts',
  'console/index.html',
];
/** Text that holds comments or prose; JSON fixtures and images are data. */
const TEXT_FILE = /\.(ts|tsx|js|mjs|cjs|sh|md|css|html)$/;
const SKIPPED_FOLDERS = new Set(['node_modules', 'dist', 'dist-bench']);

const SECTION = String.fromCharCode(0xa7);
const UPPER_NAMES = ['DES' + 'IGN', 'RELI' + 'ABILITY', 'ST' + 'YLE'];
const SEED = 'se' + 'ed';
const ISSUE = 'iss' + 'ue';

interface Pattern {
  /** What the match stands for, in the failure message. */
  readonly what: string;
  readonly regex: RegExp;
  /** The file a match would be fine to cite, when the repository had it. */
  readonly document?: string;
}

const PATTERNS: readonly Pattern[] = [
  ...UPPER_NAMES.map((name) => ({
    what: `the ${name.toLowerCase()} document`,
    regex: new RegExp(`\\b${name}\\b`),
    document: `${name}.md`,
  })),
  { what: 'an issue number', regex: new RegExp(`\\b${ISSUE}s? #?\\d`, 'i') },
  { what: 'a section number', regex: new RegExp(`${SECTION}\\s*\\d`) },
  {
    what: 'the spec the project grew from',
    regex: new RegExp(`\\b${SEED}(?:'s)? (?:report|spec|step)|\\bstep \\d+ of the ${SEED}`, 'i'),
  },
  { what: 'a part of a spec', regex: new RegExp('\\bpart (?:one|two|three)\\b', 'i') },
  { what: 'a folder outside the repository', regex: new RegExp('\\.\\./sha' + 'red\\b') },
];

/** `RFC 9110 §11.1` and the like: a public standard, not a private document. */
const PUBLIC_STANDARD = new RegExp(`\\bRFC \\d+,? ${SECTION}\\s*\\d`, 'g');

function walk(dir: string, out: string[]): string[] {
  if (!existsSync(dir)) return out;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) {
      if (!SKIPPED_FOLDERS.has(entry.name)) walk(join(dir, entry.name), out);
    } else if (TEXT_FILE.test(entry.name)) {
      out.push(join(dir, entry.name));
    }
  }
  return out;
}

function scannedFiles(): string[] {
  const files = FOLDERS.flatMap((folder) => walk(join(ROOT, folder), []));
  for (const name of ROOT_FILES) if (existsSync(join(ROOT, name))) files.push(join(ROOT, name));
  return files;
}

/** The Markdown files the repository has, by path from the root and by name. */
function shippedDocuments(files: readonly string[]): Set<string> {
  const names = new Set<string>();
  for (const file of files.filter((f) => f.endsWith('.md'))) {
    const rel = relative(ROOT, file).split('\\').join('/');
    names.add(rel);
    names.add(rel.slice(rel.lastIndexOf('/') + 1));
  }
  return names;
}

/** Whether the line names a Markdown file of the repository (`docs/guide/09-security.md §2`). */
function namesShippedDocument(line: string, shipped: ReadonlySet<string>): boolean {
  return [...line.matchAll(/[\w./-]+\.md\b/g)].some(([name]) =>
    shipped.has(name.replace(/^\.\//, '')),
  );
}

/** Every line that cites a document the repository does not contain, as `file:line: what: text`. */
function foreignCitations(files: readonly string[]): string[] {
  const shipped = shippedDocuments(files);
  const found: string[] = [];
  for (const file of files) {
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((raw, index) => {
      const line = raw.replace(PUBLIC_STANDARD, '');
      for (const pattern of PATTERNS) {
        if (!pattern.regex.test(line)) continue;
        if (pattern.document !== undefined && shipped.has(pattern.document)) continue;
        if (pattern.document === undefined && namesShippedDocument(line, shipped)) continue;
        found.push(
          `${relative(ROOT, file)}:${index + 1}: ${pattern.what}: ${raw.trim().slice(0, 120)}`,
        );
      }
    });
  }
  return found;
}

describe('citations', () => {
  it('walks the sources, tests and docs (the walk itself finds them)', () => {
    const files = scannedFiles().map((file) => relative(ROOT, file));
    expect(files).toContain('src/app.ts');
    expect(files).toContain(join('test', 'repo', 'no-foreign-citations.test.ts'));
    expect(files).toContain('README.md');
    expect(files.some((file) => file.startsWith(join('console', 'src')))).toBe(true);
  });

  it('flags what a clone cannot look up, and lets through what it can', () => {
    const cases = [
      `see ${UPPER_NAMES[1]} 47`,
      `(${UPPER_NAMES[0]} ${SECTION}12)`,
      `fixed in ${ISSUE} #5`,
      `as in ${SECTION}4 of the report`,
      `the ${SEED}'s step 7`,
    ];
    for (const text of cases) {
      expect(
        PATTERNS.some((p) => p.regex.test(text)),
        text,
      ).toBe(true);
    }
    const fine = `case-insensitive (RFC 9110 ${SECTION}11.1)`.replace(PUBLIC_STANDARD, '');
    expect(PATTERNS.some((p) => p.regex.test(fine))).toBe(false);
    expect(namesShippedDocument(`see README.md ${SECTION}2`, new Set(['README.md']))).toBe(true);
  });

  it('no file cites a document the repository does not contain', () => {
    expect(
      foreignCitations(scannedFiles()),
      'write the reason itself, or cite a file the repository has (ARCHITECTURE.md, docs/guide/)',
    ).toEqual([]);
  });
});
