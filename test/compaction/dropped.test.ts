/**
 * What a compaction dropped: identifiers, numbers, dates, quoted strings and
 * capitalised names of the folded messages that the new summary lacks.
 */
import { describe, expect, it } from 'vitest';
import { findDropped, MAX_DROPPED_ITEMS } from '../../src/compaction/dropped.js';

const ABC = 'abcdefghijklmnopqrstuvwxyz';

describe('findDropped', () => {
  it('lists each kind of detail the summary does not contain, with its seq', () => {
    const folded = [
      { seq: 3, text: 'Invoice INV-2024-001 is due on 2026-03-15 for 4,500 euros.' },
      { seq: 5, text: 'Ask Maria Lopez at https://example.com/a?b=1 about the "blue gate code".' },
    ];
    expect(findDropped(folded, 'The user has an invoice.')).toEqual([
      { text: '2026-03-15', kind: 'date', seq: 3 },
      { text: 'INV-2024-001', kind: 'identifier', seq: 3 },
      { text: '4,500', kind: 'number', seq: 3 },
      { text: 'blue gate code', kind: 'quote', seq: 5 },
      { text: 'https://example.com/a?b=1', kind: 'identifier', seq: 5 },
      { text: 'Maria Lopez', kind: 'name', seq: 5 },
    ]);
  });

  it('leaves out what the summary kept, in any case and in a plain-number spelling', () => {
    const folded = [{ seq: 1, text: 'Ticket inv-77 costs 4,500 and Bob Stone signed it in 2024.' }];
    expect(findDropped(folded, '- INV-77: 4500, signed by bob stone in 2024')).toEqual([]);
  });

  it('does not take a sentence-initial word for a name, or one digit for a number', () => {
    expect(findDropped([{ seq: 1, text: 'Then we met. Rain fell 3 times.' }], '')).toEqual([]);
  });

  it('lists a text once, at the first message that holds it', () => {
    const folded = [
      { seq: 2, text: 'order A-17 shipped' },
      { seq: 4, text: 'order A-17 arrived' },
    ];
    expect(findDropped(folded, '')).toEqual([{ text: 'A-17', kind: 'identifier', seq: 2 }]);
  });

  it(`keeps at most ${MAX_DROPPED_ITEMS}, identifiers and numbers before names`, () => {
    const folded = Array.from({ length: 40 }, (_, i) => ({
      seq: i + 1,
      // A name of letters only (Zaan, Zban, …), an identifier and a number, each different.
      text: `we met Z${ABC[i % 26]}${ABC[Math.floor(i / 26)]}n about order-${i} and code ${1000 + i}`,
    }));
    const dropped = findDropped(folded, '');
    expect(dropped).toHaveLength(MAX_DROPPED_ITEMS);
    expect(dropped.filter((d) => d.kind === 'identifier')).toHaveLength(40);
    expect(dropped.filter((d) => d.kind === 'number')).toHaveLength(10);
    // Still in the order of the messages.
    expect(dropped.map((d) => d.seq)).toEqual([...dropped.map((d) => d.seq)].sort((a, b) => a - b));
  });
});
