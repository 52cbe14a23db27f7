/**
 * The vocabulary's pure parts (store/vocabulary.ts): which words are stored,
 * the deletion keys that find a misspelling's neighbours, the edit distance
 * that checks them, and when a word is corrected at all; and the per-session
 * stem counts Postgres recall weighs words by (store/postgres/session-stems.ts).
 */
import { describe, expect, it } from 'vitest';
import {
  countSessionStems,
  MESSAGES_STEM,
  stemRange,
} from '../../src/store/postgres/session-stems.js';
import { stemOf } from '../../src/store/stem.js';
import {
  correctionOf,
  deletionKeys,
  editDistance,
  queryKeys,
  RARE_EXACT,
  vocabularyWords,
  type KnownWord,
} from '../../src/store/vocabulary.js';

const known = (word: string, messages = 3): KnownWord => ({ word, stem: stemOf(word), messages });

/** The stored words a query word's keys meet, as the stores look them up. */
function neighbours(query: string, stored: readonly string[]): string[] {
  const keys = new Set(queryKeys(query));
  return stored.filter((word) => deletionKeys(word).some((key) => keys.has(key)));
}

describe('the history vocabulary', () => {
  it('stores letter words of four to 24 letters, folded, once per message', () => {
    expect(vocabularyWords('Über den Kubernetes-Cluster: kubernetes, k8s, ID a1b2c3, api')).toEqual(
      ['uber', 'kubernetes', 'cluster'],
    );
  });

  it('counts a swap of two neighbours as one edit, and stops past the limit', () => {
    expect(editDistance('recieve', 'receive', 1)).toBe(1);
    expect(editDistance('postgress', 'postgres', 1)).toBe(1);
    expect(editDistance('authnetiication', 'authentication', 2)).toBe(2);
    expect(editDistance('kitchen', 'chicken', 1)).toBe(2);
  });

  it('finds a word one edit away by deletion keys, and two for a long word with a letter too many', () => {
    const stored = ['receive', 'postgres', 'authentication', 'house', 'recipe'];
    expect(neighbours('recieve', stored)).toEqual(['receive']);
    expect(neighbours('postgress', stored)).toEqual(['postgres']);
    expect(neighbours('howse', stored)).toEqual(['house']);
    expect(neighbours('authnetiication', stored)).toEqual(['authentication']);
  });

  it('corrects a long enough word whose stem the history lacks or holds once, to the closest, most held word', () => {
    expect(correctionOf('recieve', 0, [known('receive')])).toBe('receive');
    expect(correctionOf('recieve', RARE_EXACT - 1, [known('receive', 5)])).toBe('receive');
    // Held by as many messages as the correction would be: the user may mean it.
    expect(correctionOf('recieve', RARE_EXACT, [known('receive', 50)])).toBeUndefined();
    // Too short to correct: four letters have too many neighbours.
    expect(correctionOf('hous', 0, [known('house')])).toBeUndefined();
    // Two edits away from a short word: no correction.
    expect(correctionOf('recieve', 0, [known('relieved')])).toBeUndefined();
    // The closest wins over the most held; then the most held.
    expect(correctionOf('postgress', 0, [known('postgres', 2), known('postgrest', 9)])).toBe(
      'postgrest',
    );
    expect(
      correctionOf('authnetiication', 0, [known('authentication', 2), known('authenticated', 40)]),
    ).toBe('authentication');
  });

  it('never changes the first letter: two edits there make another word', () => {
    expect(correctionOf('studying', 0, [known('tidying', 40)])).toBeUndefined();
    expect(correctionOf('pstgres', 0, [known('postgres', 40)])).toBe('postgres');
  });
});

describe('countSessionStems', () => {
  it('counts each stem once per message, per session, with the messages counted, no system message', () => {
    const rows = countSessionStems([
      { session_id: 'a', role: 'system', content: 'You deploy things.' },
      { session_id: 'a', role: 'user', content: 'Deploy, deploying, deployed: deploy!' },
      { session_id: 'a', role: 'assistant', content: 'We paid 4,500 for the deploy.' },
      { session_id: 'b', role: 'user', content: `Deploy ${'x'.repeat(65)}.` },
      { session_id: 'b', role: 'tool', content: null },
    ]);
    const table = new Map(
      rows.sessionIds.map((id, i) => [`${id}/${rows.stems[i]}`, rows.messages[i]]),
    );
    expect(table.get(`a/${MESSAGES_STEM}`)).toBe(2);
    expect(table.get('a/deploi')).toBe(2);
    expect(table.get('a/4500')).toBe(1);
    expect(table.get(`b/${MESSAGES_STEM}`)).toBe(2);
    expect(table.get('b/deploi')).toBe(1);
    expect([...table.keys()].some((k) => k.includes('xxx'))).toBe(false);
    expect(table.has('a/thing')).toBe(false);
  });

  it('looks a word up by its stem and a prefix by every stem it starts', () => {
    expect(stemRange({ text: 'deploying', prefix: false })).toEqual({
      lower: 'deploi',
      upper: 'deploi',
    });
    expect(stemRange({ text: 'depl', prefix: true })).toEqual({
      lower: 'depl',
      upper: 'depl\uffff',
    });
  });
});
