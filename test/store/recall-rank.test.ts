/**
 * The SQLite store's recall ranking (BM25 over the session's own matches):
 * the weights, the shortlist from each word's rows, and the final order from
 * each word's count in the shortlisted text.
 */
import { describe, expect, it } from 'vitest';
import {
  CONTEXT_SPAN,
  CONTEXT_WEIGHT,
  contextSeqs,
  estimateFrequency,
  inverseFrequency,
  MAX_RANKED_TERMS,
  PERIOD_WEIGHT,
  rankInContext,
  rankShortlist,
  saturation,
  shortlist,
  termCounts,
} from '../../src/store/recall-rank.js';

const word = (text: string, prefix = false) => ({ text, prefix });

describe('BM25 parts', () => {
  it('weighs a word by how few of the searched rows hold it, never at zero', () => {
    expect(inverseFrequency(100, 1)).toBeGreaterThan(inverseFrequency(100, 10));
    expect(inverseFrequency(100, 10)).toBeGreaterThan(inverseFrequency(100, 100));
    expect(inverseFrequency(100, 100)).toBeGreaterThan(0);
    // More rows holding it than the pointer counts (a stale count) is still a weight.
    expect(inverseFrequency(10, 50)).toBeGreaterThan(0);
    expect(inverseFrequency(100, 1)).toBeCloseTo(Math.log(1 + 99.5 / 1.5), 10);
  });

  it('grows with the count and saturates, and favours the shorter row', () => {
    const once = saturation(1, 100, 100);
    const twice = saturation(2, 100, 100);
    expect(once).toBeCloseTo(1, 10);
    expect(twice).toBeGreaterThan(once);
    expect(saturation(50, 100, 100)).toBeLessThan(2.2);
    expect(saturation(1, 50, 100)).toBeGreaterThan(once);
    expect(saturation(1, 400, 100)).toBeLessThan(once);
    expect(saturation(0, 100, 100)).toBe(0);
  });

  it('counts each word as recall splits and folds them, prefix words by their start, others by their stem', () => {
    expect(
      termCounts(
        [word('deploy', true), word('deploy'), word('4812')],
        'Deploy the DEPLOYMENT; deployed 4812 and 48120.',
      ),
    ).toEqual([3, 2, 1]);
    expect(termCounts([word('heron')], '')).toEqual([0]);
  });
});

describe('a capped word', () => {
  it('estimates its frequency from how far back its newest rows reach', () => {
    // 64 rows read reach back over 128 of 100 000 searched: half of them.
    expect(estimateFrequency(64, 128, 100_000)).toBe(50_000);
    // Never fewer than were read, never more than searched.
    expect(estimateFrequency(64, 64_000, 1_000)).toBe(64);
    expect(estimateFrequency(64, 10, 100)).toBe(100);
    expect(estimateFrequency(64, 0, 100)).toBe(100);
  });

  it('is weighed by the frequency given, not by the rows listed', () => {
    const { weights } = shortlist([[1, 2], [3]], 1_000, 2, [900, 1]);
    expect(weights[0]).toBeCloseTo(inverseFrequency(1_000, 900));
    expect(weights[1]).toBeCloseTo(inverseFrequency(1_000, 1));
  });
});

describe('shortlist', () => {
  it('puts the row with the rarer word first, and keeps which words each row holds', () => {
    // Word 0 is in every row; word 1 only in row 3.
    const { weights, picked } = shortlist([[1, 2, 3, 4], [3]], 4, 4);
    expect(weights[1]).toBeGreaterThan(weights[0]!);
    expect(picked.map((p) => p.id)).toEqual([3, 1, 2, 4]);
    expect(picked[0]!.held).toBe(0b11);
    expect(picked[1]!.held).toBe(0b01);
  });

  it('sums the weights of the words a row holds', () => {
    // Row 7 holds two common words, row 8 one rarer: 2 × ln(1 + 7.5/3.5) > ln(1 + 9.5/1.5).
    const { picked } = shortlist([[5, 6, 7], [7, 9, 10], [8]], 10, 5);
    expect(picked.map((p) => p.id)).toEqual([7, 8, 5, 6, 9]);
  });

  it('reads no more than asked, the best whatever order the rows came in, ties to the earlier', () => {
    const rows = [40, 3, 17, 8, 25, 1, 33];
    const rare = [17, 33];
    const { picked } = shortlist([rows, rare], 100, 3);
    expect(picked.map((p) => p.id)).toEqual([17, 33, 1]);
    expect(shortlist([rows], 100, 0).picked).toEqual([]);
    expect(shortlist([[], []], 100, 5).picked).toEqual([]);
    expect(shortlist([rows], 100, 50).picked.map((p) => p.id)).toEqual([1, 3, 8, 17, 25, 33, 40]);
  });

  it('never lets a worse row that comes last take the place of a better one', () => {
    expect(shortlist([[5, 1, 2, 9]], 100, 2).picked.map((p) => p.id)).toEqual([1, 2]);
  });

  it('refuses more words than one mask holds', () => {
    const words = Array.from({ length: MAX_RANKED_TERMS + 1 }, () => [1]);
    expect(() => shortlist(words, 1, 1)).toThrow(new RangeError('too many words to rank'));
    const most = shortlist(words.slice(1), 1, 1);
    expect(most.picked[0]!.held).toBe(2 ** MAX_RANKED_TERMS - 1);
  });
});

describe('rankShortlist', () => {
  const row = (seq: number, content: string, held = 1) => ({
    seq,
    content,
    chars: content.length,
    held,
  });

  it('orders by how often the words occur, at equal lengths', () => {
    const rows = [
      row(2, 'heron walk walk walk'),
      row(3, 'heron heron heron walk'),
      row(5, 'heron heron walk walk'),
    ];
    const ranked = rankShortlist(rows, [word('heron')], [1], 10);
    expect(ranked.map((r) => r.seq)).toEqual([3, 5, 2]);
    expect(rankShortlist(rows, [word('heron')], [1], 2).map((r) => r.seq)).toEqual([3, 5]);
  });

  it('weighs each word by its weight', () => {
    const rows = [row(2, 'common rare', 0b11), row(3, 'common common', 0b01)];
    expect(
      rankShortlist(rows, [word('common'), word('rare')], [0.1, 5], 10).map((r) => r.seq),
    ).toEqual([2, 3]);
    expect(
      rankShortlist(rows, [word('common'), word('rare')], [5, 0.1], 10).map((r) => r.seq),
    ).toEqual([3, 2]);
  });

  it('favours the shorter row against the rows read', () => {
    const rows = [row(2, 'heron and a long tail of other words'), row(3, 'heron here')];
    expect(rankShortlist(rows, [word('heron')], [1], 10).map((r) => r.seq)).toEqual([3, 2]);
  });

  it("weighs a row's length against the average of the rows read", () => {
    // Against their average (102.5), the long row's three mentions lose to the short row's one.
    const rows = [row(2, `heron heron heron ${'x'.repeat(182)}`), row(3, 'heron')];
    expect(rows[0]!.chars).toBe(200);
    expect(rankShortlist(rows, [word('heron')], [1], 10).map((r) => r.seq)).toEqual([3, 2]);
  });

  it('takes the average over the rows read, not their total or a floor of one', () => {
    // Average 17.5: one mention in 5 characters beats three in 30 (1.41 against 1.36).
    const short = [row(2, 'heron'), row(3, `heron heron heron ${'x'.repeat(12)}`)];
    expect(short.map((r) => r.chars)).toEqual([5, 30]);
    expect(rankShortlist(short, [word('heron')], [1], 10).map((r) => r.seq)).toEqual([2, 3]);
    // Average 25: three mentions in 40 characters beat one in 10 (1.39 against 1.33).
    const long = [row(2, 'heron xxxx'), row(3, `heron heron heron ${'x'.repeat(22)}`)];
    expect(long.map((r) => r.chars)).toEqual([10, 40]);
    expect(rankShortlist(long, [word('heron')], [1], 10).map((r) => r.seq)).toEqual([3, 2]);
  });

  it('gives equal scores to the earlier message first', () => {
    const rows = [row(7, 'heron'), row(5, 'heron'), row(3, 'heron'), row(4, 'heron')];
    expect(rankShortlist(rows, [word('heron')], [1], 10).map((r) => r.seq)).toEqual([3, 4, 5, 7]);
  });

  it('counts a word the index found once, though the text read does not show it', () => {
    // Row 3's text was clipped before its word; the index said it holds it.
    const rows = [row(2, 'nothing here', 0), row(3, 'clipped', 1)];
    expect(rankShortlist(rows, [word('walrus')], [1], 10).map((r) => r.seq)).toEqual([3, 2]);
  });
});

describe('rankInContext', () => {
  const at = (seq: number, content: string, created_at = '2024-03-01T10:00:00.000Z') => ({
    seq,
    content,
    chars: 20,
    held: 0,
    created_at,
  });
  const seqs = (rows: { seq: number }[]) => rows.map((r) => r.seq);
  const words = [word('guard'), word('team')];

  it('ranks a match among matches above the same match alone', () => {
    // Rows 3 and 12 hold "guard" once each at equal lengths; alone, the
    // earlier wins the tie. Row 12's neighbours hold "team".
    const rows = [
      at(3, 'guard'),
      at(10, 'team'),
      at(11, 'team'),
      at(12, 'guard'),
      at(13, 'nothing'),
    ];
    expect(seqs(rankShortlist([rows[0]!, rows[3]!], words, [1, 1], 2))).toEqual([3, 12]);
    const ranked = rankInContext(rows, words, [1, 1], 10);
    expect(seqs(ranked).indexOf(12)).toBeLessThan(seqs(ranked).indexOf(3));
    // Its score: its own plus CONTEXT_WEIGHT of each neighbour's own, within CONTEXT_SPAN.
    const own = rankShortlist([rows[3]!], words, [1, 1], 1)[0]!.score;
    const twelve = ranked.find((r) => r.seq === 12)!;
    expect(twelve.score).toBeCloseTo(own * (1 + 2 * CONTEXT_WEIGHT), 10);
    expect(CONTEXT_SPAN).toBe(2);
  });

  it('returns only rows that hold an evidence word; the others give context', () => {
    const rows = [at(4, 'team'), at(5, 'guard'), at(6, 'nothing at all')];
    // Equal scores, each lifting the other: the earlier first.
    expect(seqs(rankInContext(rows, words, [1, 1], 10))).toEqual([4, 5]);
    // "team" is no evidence: row 4 lifts row 5 but is not returned itself.
    const ranked = rankInContext(rows, words, [1, 1], 10, { evidence: [true, false] });
    expect(seqs(ranked)).toEqual([5]);
    expect(ranked[0]!.score).toBeGreaterThan(rankShortlist([rows[1]!], words, [1, 1], 1)[0]!.score);
  });

  it('weighs a row written within the named period PERIOD_WEIGHT times its own score', () => {
    const rows = [
      at(3, 'guard', '2023-10-12T23:59:59.000Z'),
      at(30, 'guard', '2023-10-13T08:00:00.000Z'),
      at(60, 'guard', '2023-10-14T00:00:00.000Z'),
    ];
    const period = { from: Date.UTC(2023, 9, 13), to: Date.UTC(2023, 9, 14) };
    expect(seqs(rankInContext(rows, words, [1, 1], 10))).toEqual([3, 30, 60]);
    const ranked = rankInContext(rows, words, [1, 1], 10, { period });
    expect(seqs(ranked)).toEqual([30, 3, 60]);
    expect(ranked[0]!.score).toBeCloseTo(ranked[1]!.score * PERIOD_WEIGHT, 10);
  });

  it('reads the seqs within CONTEXT_SPAN of the best, from 1 to the pointer, not read yet', () => {
    expect(contextSeqs([2, 9], new Set([2, 3, 9]), 10)).toEqual([1, 4, 7, 8, 10]);
    expect(contextSeqs([], new Set(), 10)).toEqual([]);
  });
});
