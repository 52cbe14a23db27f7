/**
 * safeBoundaries on its own, at the edges planCut never reaches: no messages
 * at all (one boundary, before nothing, which is safe), and a history that
 * starts with a tool result (never safe to cut in front of it).
 */
import { describe, expect, it } from 'vitest';
import { safeBoundaries } from '../../src/compaction/cut.js';

describe('safeBoundaries at the edges', () => {
  it('has one safe boundary for no messages', () => {
    expect(safeBoundaries([])).toEqual([true]);
  });

  it('marks the boundary before a leading tool result unsafe, and the one after it safe', () => {
    expect(
      safeBoundaries([
        { role: 'tool', chars: 5, toolCallId: 'orphan' },
        { role: 'user', chars: 5 },
      ]),
    ).toEqual([false, true, true]);
  });
});
