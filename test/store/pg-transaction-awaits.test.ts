/**
 * No transaction spans a foreign `await`, for the Postgres store: a Postgres
 * transaction is necessarily async, so the rule becomes "a unit of work awaits
 * only its own statements". A static check over src/store/postgres/pg-store.ts:
 * inside every `this.tx(...)` callback, and inside the helpers those callbacks
 * call, each `await` is a query on the transaction's client or one of those
 * helpers — never a model call, a timer, or another unit of work (which would
 * take a second connection while holding the first).
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SOURCE = fileURLToPath(new URL('../../src/store/postgres/pg-store.ts', import.meta.url));

/** What an await inside a unit of work may wait for. */
const ALLOWED = [
  /^c\.query[<(]/,
  /^lockSession\(c,/,
  /^getSession\(c,/,
  /^ensureDaemon\(c,/,
  /^insertMessageRows\(c,/,
  /^insertCompaction\(c,/,
  /^this\.appendLocked\(c,/,
  // pg-append.ts: one statement on the same client (data-modifying CTEs), nothing else.
  /^appendAt\(c,/,
  // pg-keys.ts: one INSERT … ON CONFLICT on the same client, nothing else.
  /^chargeSessionTokens\(c,/,
  // pg-store.ts: one SELECT … FOR UPDATE of the task row on the same client.
  /^this\.assertStillRunning\(c,/,
  // pg-vectors.ts: one INSERT … SELECT of the source's vectors on the same client.
  /^copyVectorsToFork\(c,/,
];
/** Helpers a unit of work may await, whose own awaits are checked the same way. */
const HELPERS = [
  'async function lockSession(',
  'async function getSession(',
  'async function ensureDaemon(',
  'async function insertCompaction(',
  'private async appendLocked(',
  'private async assertStillRunning(',
];

function withoutComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
}

/** The text from `open` (an opening bracket) to its matching close. */
function balanced(source: string, open: number): string {
  const pairs: Record<string, string> = { '(': ')', '{': '}' };
  const close = pairs[source[open]!]!;
  let depth = 0;
  for (let i = open; i < source.length; i++) {
    if (source[i] === source[open]) depth++;
    else if (source[i] === close && --depth === 0) return source.slice(open, i + 1);
  }
  throw new Error(`unbalanced ${source[open]} at ${open}`);
}

function awaitsIn(body: string): string[] {
  return [...body.matchAll(/\bawait\s+([^;]{0,40})/g)].map((m) => m[1]!.replace(/\s+/g, ''));
}

describe('PgStore units of work', () => {
  const source = withoutComments(fs.readFileSync(SOURCE, 'utf8'));

  it('await only their own statements', () => {
    const bodies: { where: string; body: string }[] = [];
    for (const match of source.matchAll(/this\.tx\(/g)) {
      bodies.push({
        where: `this.tx at ${match.index}`,
        body: balanced(source, match.index + 'this.tx'.length),
      });
    }
    for (const helper of HELPERS) {
      const at = source.indexOf(helper);
      expect(at, helper).toBeGreaterThan(-1);
      bodies.push({ where: helper, body: balanced(source, source.indexOf('{', at)) });
    }
    expect(bodies.length).toBeGreaterThan(25);
    const offenders = bodies.flatMap(({ where, body }) =>
      awaitsIn(body)
        .filter((awaited) => !ALLOWED.some((pattern) => pattern.test(awaited)))
        .map((awaited) => `${where}: await ${awaited}`),
    );
    expect(offenders).toEqual([]);
  });

  it('the check sees a forbidden await', () => {
    const sample = 'this.tx(async (c) => { await c.query("x"); await sleep(5); })';
    const body = balanced(sample, 'this.tx'.length);
    expect(awaitsIn(body).filter((a) => !ALLOWED.some((p) => p.test(a)))).toEqual(['sleep(5)']);
  });
});
