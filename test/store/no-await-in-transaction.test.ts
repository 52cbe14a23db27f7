/**
 * No database transaction spans an `await` (a transaction held open across a
 * model or tool call would block every other writer). A static check over
 * src/**\/*.ts: every `.transaction(` call gets an inline callback that is not
 * `async` and contains no `await`; so does every `this.write(` of the SQLite
 * store's parts (their writer runs the callback inside a transaction), but
 * for the writer handed on to a part as it is (`(work) => this.write(work)`). The scanner blanks out comments, strings,
 * template text and regex literals first, so parentheses or the word "await"
 * inside them neither hide nor fake a problem.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC_DIR = fileURLToPath(new URL('../../src/', import.meta.url));

/** Replaces the contents of comments, strings, templates and regexes with spaces (same length). */
function maskNonCode(source: string): string {
  const out = source.split('');
  const blank = (from: number, to: number) => {
    for (let k = from; k < to && k < out.length; k++) if (out[k] !== '\n') out[k] = ' ';
  };
  // Each `{` opened in code; 'template' marks the `${` that re-enters a template.
  const braces: ('code' | 'template')[] = [];
  let i = 0;

  /** Scans template text from `i` (after a backtick or a closing `}`); returns the new index. */
  const scanTemplate = (start: number): number => {
    let j = start;
    while (j < source.length) {
      const c = source[j];
      if (c === '\\') {
        blank(j, j + 2);
        j += 2;
      } else if (c === '`') {
        return j + 1;
      } else if (c === '$' && source[j + 1] === '{') {
        braces.push('template');
        return j + 2;
      } else {
        blank(j, j + 1);
        j += 1;
      }
    }
    return j;
  };

  /** Whether a `/` at `i` starts a regex literal (by the previous significant character). */
  const startsRegex = (at: number): boolean => {
    let k = at - 1;
    while (k >= 0 && /\s/.test(source[k]!)) k--;
    if (k < 0) return true;
    const prev = source[k]!;
    if ('(,=:[!&|?{};+-*%<>~^'.includes(prev)) return true;
    const word = /\b(return|typeof|case|do|else|in|of|void|yield|await)$/.exec(
      source.slice(Math.max(0, k - 10), k + 1),
    );
    return word !== null;
  };

  while (i < source.length) {
    const c = source[i]!;
    const next = source[i + 1];
    if (c === '/' && next === '/') {
      const end = source.indexOf('\n', i);
      const stop = end === -1 ? source.length : end;
      blank(i, stop);
      i = stop;
    } else if (c === '/' && next === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end === -1 ? source.length : end + 2;
      blank(i, stop);
      i = stop;
    } else if (c === '"' || c === "'") {
      let j = i + 1;
      while (j < source.length && source[j] !== c && source[j] !== '\n')
        j += source[j] === '\\' ? 2 : 1;
      blank(i + 1, j);
      i = j + 1;
    } else if (c === '`') {
      i = scanTemplate(i + 1);
    } else if (c === '{') {
      braces.push('code');
      i += 1;
    } else if (c === '}') {
      i = braces.pop() === 'template' ? scanTemplate(i + 1) : i + 1;
    } else if (c === '/' && startsRegex(i)) {
      let j = i + 1;
      let inClass = false;
      while (j < source.length && source[j] !== '\n') {
        const r = source[j];
        if (r === '\\') j += 1;
        else if (r === '[') inClass = true;
        else if (r === ']') inClass = false;
        else if (r === '/' && !inClass) break;
        j += 1;
      }
      blank(i + 1, j);
      i = j + 1;
    } else {
      i += 1;
    }
  }
  return out.join('');
}

interface TransactionCall {
  line: number;
  /** The masked text between the parentheses of `.transaction( … )`. */
  callback: string;
  problems: string[];
}

const TRANSACTION_CALL = /\.transaction\s*\(/g;
/**
 * A unit of work handed to the SQLite store's writer (`this.write(work)`, or
 * `this.writeForTask(task, work)`: the match ends where the work begins), or
 * a transaction of its own.
 */
const SQLITE_WRITE_CALL =
  /\.transaction\s*\(|\bthis\.write\s*\((?!\s*work\s*\))|\bthis\.writeForTask\s*\([^,()]*,/g;

/** Finds every call `pattern` matches in `source` (by default `.transaction(`) and checks its callback. */
function checkTransactions(source: string, pattern = TRANSACTION_CALL): TransactionCall[] {
  const code = maskNonCode(source);
  const calls: TransactionCall[] = [];
  for (const match of code.matchAll(pattern)) {
    // The callback runs from the end of the match to the `,` or `)` that ends its argument.
    const start = match.index + match[0].length;
    const line = code.slice(0, start).split('\n').length;
    let depth = 0;
    let close = -1;
    for (let k = start; k < code.length; k++) {
      const c = code[k];
      if (c === '(' || c === '[' || c === '{') depth += 1;
      else if ((c === ')' || c === ']' || c === '}') && --depth < 0) {
        close = k;
        break;
      } else if (c === ',' && depth === 0) {
        close = k;
        break;
      }
    }
    if (close === -1) {
      calls.push({ line, callback: code.slice(start), problems: ['unbalanced parentheses'] });
      continue;
    }
    const callback = code.slice(start, close);
    const problems: string[] = [];
    if (/^\s*async\b/.test(callback)) problems.push('the callback is async');
    if (/\bawait\b/.test(callback)) problems.push('the callback contains await');
    if (
      !/^\s*(async\s+)?(\([^)]*\)|[A-Za-z_$][\w$]*)\s*=>|^\s*(async\s+)?function\b/.test(callback)
    ) {
      problems.push('the callback is not written inline, so it cannot be checked');
    }
    calls.push({ line, callback, problems });
  }
  return calls;
}

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.isFile() && entry.name.endsWith('.ts') ? [full] : [];
  });
}

describe('no await inside a database transaction', () => {
  it('holds for every .transaction( call under src/', () => {
    const violations: string[] = [];
    const perFile = new Map<string, number>();
    for (const file of sourceFiles(SRC_DIR)) {
      const rel = path.relative(SRC_DIR, file);
      const pattern = rel.startsWith(path.join('store', 'sqlite')) ? SQLITE_WRITE_CALL : undefined;
      const calls = checkTransactions(fs.readFileSync(file, 'utf8'), pattern);
      perFile.set(rel, calls.length);
      for (const call of calls) {
        for (const problem of call.problems) violations.push(`src/${rel}:${call.line}: ${problem}`);
      }
    }
    expect(violations).toEqual([]);
    // The scan really saw the store's transactions (it is not vacuously green).
    expect(perFile.get(path.join('store', 'sqlite', 'sqlite-store.ts'))).toBeGreaterThanOrEqual(30);
    expect(
      perFile.get(path.join('store', 'sqlite', 'sqlite-call-records.ts')),
    ).toBeGreaterThanOrEqual(3);
    expect(perFile.get(path.join('store', 'sqlite', 'open-database.ts'))).toBeGreaterThanOrEqual(1);
  });

  describe('the scanner', () => {
    const problemsOf = (source: string) => checkTransactions(source).map((c) => c.problems);

    it('accepts synchronous inline callbacks, whatever follows them', () => {
      expect(
        problemsOf(`
          const run = db.transaction(() => {
            insert.run(x, ')', "(", \`)\${f(')')}\`, /\\)/.source);
            if (a) { nested(() => 1); }
          }).immediate();
          await somethingElse();
          db.transaction(function () { return 1; })();
          db.transaction((a: number, b) => a + b);
          db.transaction(x => x);
        `),
      ).toEqual([[], [], [], []]);
    });

    it("checks the SQLite store writer's units of work, but for the writer handed on as it is", () => {
      const sqlite = (source: string) =>
        checkTransactions(source, SQLITE_WRITE_CALL).map((c) => c.problems);
      expect(sqlite('return this.write(() => { stmt.run(); });')).toEqual([[]]);
      expect(sqlite('return this.write(async () => { await other(); });')).toEqual([
        ['the callback is async', 'the callback contains await'],
      ]);
      expect(sqlite('this.write(unit);')).toEqual([
        ['the callback is not written inline, so it cannot be checked'],
      ]);
      expect(sqlite('new Part(stmt, (work) => this.write(work));')).toEqual([]);
      expect(
        sqlite('return this.writeForTask(options.runningTask, () => stmt.run(a, b).changes > 0);'),
      ).toEqual([[]]);
      expect(
        sqlite('return this.writeForTask(task, async () => { await other(); }, more);'),
      ).toEqual([['the callback is async', 'the callback contains await']]);
    });

    it('flags async callbacks and awaits, even after tricky strings and comments', () => {
      expect(problemsOf('db.transaction(async () => { x(); })')).toEqual([
        ['the callback is async'],
      ]);
      expect(problemsOf('db.transaction(() => { const s = ")"; await write(s); })')).toEqual([
        ['the callback contains await'],
      ]);
      expect(
        problemsOf('db.transaction(() => { /* ) */ const t = `(${g(")")})`; await t; })'),
      ).toEqual([['the callback contains await']]);
      expect(problemsOf('db.transaction(() => { const r = /[)(]/g; await r; })')).toEqual([
        ['the callback contains await'],
      ]);
      expect(
        problemsOf(`db
          .transaction(async function () {
            for await (const x of y) use(x);
          })`),
      ).toEqual([['the callback is async', 'the callback contains await']]);
    });

    it('ignores mentions in comments and strings, and flags callbacks passed by name', () => {
      expect(
        problemsOf(`
          // db.transaction(async () => { await x; })
          const doc = "db.transaction(async () => await x)";
          /* .transaction( */
        `),
      ).toEqual([]);
      expect(problemsOf('db.transaction(this.work)')).toEqual([
        ['the callback is not written inline, so it cannot be checked'],
      ]);
      expect(problemsOf('db.transaction(() => { x(); ')).toEqual([['unbalanced parentheses']]);
    });
  });
});
