import { describe, expect, it } from 'vitest';
import { editDistance, nearestName } from '../../src/config/nearest-name.js';

describe('nearestName', () => {
  const known = ['maxIterations', 'memory', 'tools', 'name', 'current_time', 'history_search'];

  it.each([
    ['maxIteration', 'maxIterations'],
    ['memroy', 'memory'],
    ['tols', 'tools'],
    ['Tools', 'tools'],
    ['curent_time', 'current_time'],
    ['history_serch', 'history_search'],
  ])('%s → %s', (typo, meant) => {
    expect(nearestName(typo, known)).toBe(meant);
  });

  it.each(['prompt', 'x', 'nm', 'weather', 'size', 'maxChars'])('offers nothing for %s', (far) => {
    expect(nearestName(far, known)).toBeUndefined();
  });

  it('counts a swap of neighbours as one edit', () => {
    expect(editDistance('memroy', 'memory')).toBe(1);
    expect(editDistance('', 'abc')).toBe(3);
    expect(editDistance('kitten', 'sitting')).toBe(3);
  });
});
