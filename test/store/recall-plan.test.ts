/**
 * The SQLite recall planner: the words' matches in the whole index against
 * the session's compacted messages, the shorter read chosen; each word
 * counted once a minute at most.
 */
import { describe, expect, it } from 'vitest';
import {
  RecallPlanner,
  WORD_COUNT_TTL_MS,
  WORD_MATCHES_CAP,
} from '../../src/store/sqlite/recall-plan.js';

function planner(counts: Record<string, number>) {
  const asked: string[] = [];
  let clock = 1_000;
  const p = new RecallPlanner(
    (match, cap) => {
      asked.push(match);
      expect(cap).toBe(WORD_MATCHES_CAP);
      return Math.min(counts[match.replace('content : ', '')] ?? 0, cap);
    },
    () => clock,
  );
  return { p, asked, advance: (ms: number) => (clock += ms) };
}

describe('RecallPlanner', () => {
  it('searches the words alone when their matches are fewer than the session’s messages', () => {
    const { p } = planner({ '"heron"': 3, '"walk"*': 10 });
    expect(p.plan(['"heron"', '"walk"*'], 100_000)).toBe('words');
    expect(p.plan(['"heron"', '"walk"*'], 14)).toBe('words');
    expect(p.plan(['"heron"', '"walk"*'], 13)).toBe('session');
    expect(p.plan(['"heron"'], 4)).toBe('words');
  });

  it('names the session once the words are common, however long the session', () => {
    const { p, asked } = planner({ '"deploy"*': 45_000, '"heron"': 1 });
    expect(p.plan(['"deploy"*', '"heron"'], 1_000_000)).toBe('session');
    // It stopped counting at the first word over the budget.
    expect(asked).toEqual(['content : "deploy"*']);
  });

  it('counts a word once, then again after the memo’s time', () => {
    const { p, asked, advance } = planner({ '"heron"': 2 });
    p.plan(['"heron"'], 50);
    p.plan(['"heron"'], 50);
    expect(asked).toHaveLength(1);
    advance(WORD_COUNT_TTL_MS);
    p.plan(['"heron"'], 50);
    expect(asked).toHaveLength(2);
  });

  it('searches the words alone for no words at all (nothing to read)', () => {
    expect(planner({}).p.plan([], 10)).toBe('words');
  });
});
