/** The compaction panel offers "Compact now" only when the server's dry run finds something to compact. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Api } from '../src/lib/api';
import { compactOffer } from '../src/lib/compact-offer';
import { ApiContext } from '../src/lib/hooks';
import type { Message, Session } from '../src/lib/types';
import { CompactPanel, Dropped } from '../src/views/SessionView';

const SESSION: Session = {
  id: 'sess_8bQ2aZ0yXc4vN6mK1pL3sT5w',
  agent_name: 'assistant',
  mode: 'chat',
  status: 'active',
  title: null,
  created_at: '2026-03-02T09:15:00.000Z',
  updated_at: '2026-03-02T09:15:00.000Z',
  message_count: 1,
  compact_summary: null,
  compact_size: 0,
  compaction_count: 0,
  compact_seq: 0,
};

const SYSTEM: Message = {
  seq: 1,
  role: 'system',
  content: 'You are a test assistant.',
  compacted: false,
};
const EXCHANGE: Message[] = [
  SYSTEM,
  { seq: 2, role: 'user', content: 'hello', compacted: false },
  { seq: 3, role: 'assistant', content: 'Hi.', compacted: false },
];
const NONE = { compactedCount: 0 };

describe('compactOffer', () => {
  it('offers compaction when the dry run would compact something', () => {
    expect(compactOffer(SESSION, EXCHANGE, { compactedCount: 1 })).toEqual({ kind: 'offer' });
  });

  it('offers nothing on an empty session, and says why', () => {
    expect(compactOffer(SESSION, [SYSTEM], NONE)).toEqual({
      kind: 'nothing',
      reason: 'Nothing to compact: the session has no messages yet.',
    });
  });

  it('offers nothing when the dry run finds nothing in a short session', () => {
    const offer = compactOffer(SESSION, EXCHANGE, NONE);
    expect(offer.kind).toBe('nothing');
    expect(offer.kind === 'nothing' && offer.reason).toMatch(
      /^Nothing to compact yet: the 2 messages/,
    );
  });

  it('offers nothing once everything is in the summary, or on a closed session', () => {
    const folded = EXCHANGE.map((m) => (m.role === 'system' ? m : { ...m, compacted: true }));
    expect(compactOffer({ ...SESSION, compact_size: 2 }, folded, NONE)).toEqual({
      kind: 'nothing',
      reason: 'Nothing to compact: every message is in the summary.',
    });
    expect(compactOffer({ ...SESSION, status: 'closed' }, EXCHANGE, undefined).kind).toBe(
      'nothing',
    );
  });

  it('leaves the decision to the server when there is no dry run (an older server)', () => {
    expect(compactOffer(SESSION, [SYSTEM], undefined)).toEqual({ kind: 'offer' });
  });
});

describe('<CompactPanel>', () => {
  const api = new Api({
    onUnauthorized: () => undefined,
    storage: { getItem: () => null, setItem: () => undefined, removeItem: () => undefined },
  });
  const render = (session: Session, messages: Message[], dryRun: { compactedCount: number }) =>
    renderToString(
      <ApiContext.Provider value={api}>
        <CompactPanel
          session={session}
          compactions={[]}
          offer={compactOffer(session, messages, dryRun)}
          onChange={() => undefined}
        />
      </ApiContext.Provider>,
    );

  it('has no Compact now, Preview or Undo on an empty session, only the reason', () => {
    const html = render(SESSION, [SYSTEM], NONE);
    expect(html).not.toContain('Compact now');
    expect(html).not.toContain('Preview');
    expect(html).not.toContain('Undo last compaction');
    expect(html).toContain('Nothing to compact: the session has no messages yet.');
  });

  it('says there are no compactions yet in a sentence, not as a numbered item', () => {
    const html = render(SESSION, [SYSTEM], NONE);
    expect(html).toContain('<p class="no-history">No compactions yet.</p>');
    expect(html).not.toContain('<li>No compactions yet.</li>');
    expect(html).not.toContain('<ol class="history">');
  });

  it('offers Preview and Compact now when there is something to compact, and Undo once compacted', () => {
    const html = render({ ...SESSION, compact_size: 2 }, EXCHANGE, { compactedCount: 1 });
    expect(html).toContain('>Preview</button>');
    expect(html).toContain('>Compact now</button>');
    expect(html).toContain('>Undo last compaction</button>');
    expect(html).not.toContain('Nothing to compact');
  });
});

describe('<Dropped>', () => {
  const render = (dropped: Parameters<typeof Dropped>[0]['dropped']) =>
    renderToString(<Dropped dropped={dropped} />);

  it('lists what the summary left out, with its kind and message', () => {
    const html = render([
      { text: 'INV-2024-001', kind: 'identifier', seq: 3 },
      { text: '4,500', kind: 'number', seq: 5 },
    ]);
    expect(html).toContain('Not in the summary: 2 details');
    expect(html).toContain('<code>INV-2024-001</code>');
    expect(html).toContain('identifier, message #3');
    expect(html).toContain('number, message #5');
  });

  it('says so when nothing was dropped, and shows nothing for a record made before it was kept', () => {
    expect(render([])).toContain('Nothing dropped that Cairn could spot.');
    expect(render(null)).toBe('');
    expect(render(undefined)).toBe('');
  });
});
