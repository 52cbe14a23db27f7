/**
 * The SQLite recall planner: a long session's search reads the words' matches
 * in the whole index when they are fewer than WORD_MATCHES_CAP, counting no
 * further than needed and reusing a count for a minute; a shorter session
 * reads its own entries.
 */
import { describe, expect, it } from 'vitest';
import {
  COMMON_SKIP_MIN_MESSAGES,
  RARE_WORD_MATCHES,
  RecallPlanner,
  WORD_COUNT_TTL_MS,
  WORD_MATCHES_CAP,
} from '../../src/store/sqlite/recall-plan.js';

const LONG = 100_000;

function planner(counts: Record<string, number>) {
  const asked: [string, number][] = [];
  let clock = 1_000;
  const p = new RecallPlanner(
    (match, cap) => {
      asked.push([match, cap]);
      return Math.min(counts[match.replace('content : ', '')] ?? 0, cap);
    },
    () => clock,
  );
  return { p, asked, advance: (ms: number) => (clock += ms) };
}

describe('RecallPlanner', () => {
  it('reads the words alone for a long session when they match fewer than the cap', () => {
    const { p } = planner({ '"heron"': 3, '"walk"*': 10 });
    expect(p.plan(['"heron"', '"walk"*'], LONG)).toBe('words');
    expect(p.plan(['"heron"', '"walk"*'], WORD_MATCHES_CAP)).toBe('words');
  });

  it('reads a shorter session’s own entries without counting anything', () => {
    const { p, asked } = planner({ '"heron"': 3 });
    expect(p.plan(['"heron"'], WORD_MATCHES_CAP - 1)).toBe('session');
    expect(asked).toEqual([]);
  });

  it('counts no further than the budget left, and stops at the word that uses it up', () => {
    const { p, asked } = planner({ '"heron"': 3, '"deploy"*': 45_000, '"pond"': 1 });
    expect(p.plan(['"heron"', '"deploy"*', '"pond"'], LONG)).toBe('session');
    expect(asked).toEqual([
      ['content : "heron"', WORD_MATCHES_CAP],
      ['content : "deploy"*', WORD_MATCHES_CAP - 3],
    ]);
    expect(planner({ '"a"': 2_500, '"b"': 2_500 }).p.plan(['"a"', '"b"'], LONG)).toBe('session');
    expect(planner({ '"a"': 2_500, '"b"': 2_499 }).p.plan(['"a"', '"b"'], LONG)).toBe('words');
  });

  it('reuses a count for a minute: a complete one always, a stopped one for a budget it covers', () => {
    const { p, asked, advance } = planner({ '"heron"': 2, '"deploy"*': 45_000 });
    p.plan(['"heron"'], LONG);
    p.plan(['"heron"', '"deploy"*'], LONG);
    expect(asked.map(([match]) => match)).toEqual(['content : "heron"', 'content : "deploy"*']);
    // "deploy" was counted to the 4 998 left after "heron": enough for it alone.
    expect(p.plan(['"deploy"*'], LONG)).toBe('session');
    expect(asked.at(-1)).toEqual(['content : "deploy"*', WORD_MATCHES_CAP]);
    expect(p.plan(['"heron"', '"deploy"*'], LONG)).toBe('session');
    expect(asked).toHaveLength(3);
    advance(WORD_COUNT_TTL_MS);
    p.plan(['"heron"'], LONG);
    expect(asked).toHaveLength(4);
  });

  it('reads the words alone for no words at all (nothing to read)', () => {
    expect(planner({}).p.plan([], LONG)).toBe('words');
  });

  it('reads a recall word alone when it is rare in the whole index and the session is long', () => {
    const { p, asked } = planner({ '"heron"': RARE_WORD_MATCHES - 1, '"deploy"': 45_000 });
    expect(p.rareInIndex('"heron"', LONG)).toBe(true);
    expect(p.rareInIndex('"deploy"', LONG)).toBe(false);
    expect(asked).toEqual([
      ['content : "heron"', RARE_WORD_MATCHES],
      ['content : "deploy"', RARE_WORD_MATCHES],
    ]);
    expect(p.rareInIndex('"heron"', WORD_MATCHES_CAP - 1)).toBe(false);
    expect(asked).toHaveLength(2);
  });

  it("remembers a word's share of a session for a minute, per session", () => {
    const { p, advance } = planner({});
    const long = COMMON_SKIP_MIN_MESSAGES;
    expect(p.knownShare('s1', '"deploy"', long)).toBeUndefined();
    p.rememberShare('s1', '"deploy"', 400, 1_000);
    expect(p.knownShare('s1', '"deploy"', long)).toBe(0.4);
    expect(p.knownShare('s2', '"deploy"', long)).toBeUndefined();
    advance(WORD_COUNT_TTL_MS - 1);
    expect(p.knownShare('s1', '"deploy"', long)).toBe(0.4);
    advance(1);
    expect(p.knownShare('s1', '"deploy"', long)).toBeUndefined();
  });

  it('offers no remembered share for a short session: all its words are read', () => {
    const { p } = planner({});
    p.rememberShare('s1', '"deploy"', 5, 10);
    expect(p.knownShare('s1', '"deploy"', COMMON_SKIP_MIN_MESSAGES - 1)).toBeUndefined();
    expect(p.knownShare('s1', '"deploy"', COMMON_SKIP_MIN_MESSAGES)).toBe(0.5);
  });
});
