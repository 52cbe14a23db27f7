/**
 * The SQLite recall planner: the words' matches in the whole index against
 * the session's compacted messages, the shorter read chosen; counting stops
 * once the words have matched as many, and each count is reused for a minute.
 */
import { describe, expect, it } from 'vitest';
import {
  RecallPlanner,
  WORD_COUNT_TTL_MS,
  WORD_MATCHES_CAP,
} from '../../src/store/sqlite/recall-plan.js';

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
  it('searches the words alone when their matches are fewer than the session’s messages', () => {
    expect(planner({ '"heron"': 3, '"walk"*': 10 }).p.plan(['"heron"', '"walk"*'], 100_000)).toBe(
      'words',
    );
    expect(planner({ '"heron"': 3, '"walk"*': 10 }).p.plan(['"heron"', '"walk"*'], 14)).toBe(
      'words',
    );
    expect(planner({ '"heron"': 3, '"walk"*': 10 }).p.plan(['"heron"', '"walk"*'], 13)).toBe(
      'session',
    );
  });

  it('counts no further than the budget left, and never past the cap', () => {
    const { p, asked } = planner({ '"heron"': 3, '"deploy"*': 45_000, '"pond"': 1 });
    expect(p.plan(['"heron"', '"deploy"*', '"pond"'], 1_000_000)).toBe('session');
    // The cap, then what the first word left of it; the third word is never counted.
    expect(asked).toEqual([
      ['content : "heron"', WORD_MATCHES_CAP],
      ['content : "deploy"*', WORD_MATCHES_CAP - 3],
    ]);
    expect(planner({ '"heron"': 3 }).p.plan(['"heron"'], 2)).toBe('session');
  });

  it('reuses a count for a minute: a complete one always, a stopped one for a budget it covers', () => {
    const { p, asked, advance } = planner({ '"heron"': 2, '"deploy"*': 45_000 });
    p.plan(['"heron"'], 50);
    p.plan(['"heron"'], 5_000);
    expect(asked).toHaveLength(1);
    // Stopped at 100: enough to answer for a session of 80, not for one of 500.
    expect(p.plan(['"deploy"*'], 100)).toBe('session');
    expect(p.plan(['"deploy"*'], 80)).toBe('session');
    expect(asked).toHaveLength(2);
    expect(p.plan(['"deploy"*'], 500)).toBe('session');
    expect(asked.at(-1)).toEqual(['content : "deploy"*', 500]);
    advance(WORD_COUNT_TTL_MS);
    p.plan(['"heron"'], 50);
    expect(asked.at(-1)).toEqual(['content : "heron"', 50]);
  });

  it('searches the words alone for no words at all (nothing to read)', () => {
    expect(planner({}).p.plan([], 10)).toBe('words');
  });
});
