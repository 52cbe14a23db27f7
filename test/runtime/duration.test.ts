/** Durations as agent.json writes them: the unit table, and errors that name the setting. */
import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/runtime/duration.js';

describe('parseDuration', () => {
  it('reads each unit', () => {
    expect(parseDuration('45s', 'x')).toBe(45_000);
    expect(parseDuration('2m', 'x')).toBe(120_000);
    expect(parseDuration('3h', 'x')).toBe(10_800_000);
    expect(parseDuration('1d', 'x')).toBe(86_400_000);
  });

  it('names the setting it read in its error', () => {
    expect(() => parseDuration('soon', 'approvalTimeout')).toThrow(
      'approvalTimeout "soon" is not a duration like 30s, 10m, 1h or 2d.',
    );
    expect(() => parseDuration('0m', 'daemon.every')).toThrow(/^daemon\.every "0m"/);
  });
});
