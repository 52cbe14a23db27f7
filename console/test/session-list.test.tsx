/** The sessions list: each session named by its title or how it began, with its counts and times. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { formatTime } from '../src/lib/format';
import { LABEL_MAX_CHARS, sessionHeading, sessionLabel } from '../src/lib/session-list';
import type { Message, Session } from '../src/lib/types';
import { SessionTable } from '../src/views/SessionsView';

/** A row as `GET /sessions` returns it. */
function session(overrides: Partial<Session> = {}): Session {
  return {
    id: 'sess_3PzW8GqFvX0c1tTt5JkR2Lm9',
    agent_name: 'assistant',
    mode: 'chat',
    status: 'active',
    title: null,
    created_at: '2026-03-02T09:15:00.000Z',
    updated_at: '2026-03-02T09:20:00.000Z',
    message_count: 9,
    compact_summary: 'They planned a trip.',
    compact_size: 4,
    compaction_count: 2,
    compact_seq: 5,
    cost: 0,
    first_user_message: 'Plan a trip to Lyon in March',
    ...overrides,
  };
}

describe('sessionLabel', () => {
  it('is the title when there is one', () => {
    expect(sessionLabel(session({ title: 'Trip planning' }))).toEqual({
      text: 'Trip planning',
      kind: 'title',
    });
  });

  it('is the first user message on one line, trimmed, when untitled', () => {
    expect(
      sessionLabel(session({ title: '  ', first_user_message: '  Plan a trip\n\nto Lyon  ' })),
    ).toEqual({ text: 'Plan a trip to Lyon', kind: 'first-message' });
  });

  it('cuts a long first message with an ellipsis', () => {
    const label = sessionLabel(session({ first_user_message: 'word '.repeat(60) }));
    expect(label.text.length).toBeLessThanOrEqual(LABEL_MAX_CHARS);
    expect(label.text.endsWith('…')).toBe(true);
  });

  it('says when nothing was said yet (and on an older server without the field)', () => {
    expect(sessionLabel(session({ first_user_message: null })).kind).toBe('empty');
    const { first_user_message: _f, ...older } = session();
    expect(sessionLabel(older)).toEqual({ text: 'No messages yet', kind: 'empty' });
  });
});

describe('<SessionTable>', () => {
  it('shows the label with the id in the link, the agent, counts, compactions and times', () => {
    const row = session();
    const html = renderToString(<SessionTable sessions={[row]} />);
    expect(html).toContain(`href="/console/sessions/${row.id}"`);
    expect(html).toMatch(
      /<a [^>]*>.*Plan a trip to Lyon in March.*sess_3PzW8GqFvX0c1tTt5JkR2Lm9.*<\/a>/s,
    );
    expect(html).toContain('<td data-label="Agent">assistant</td>');
    expect(html).toContain('<td data-label="Messages">9</td>');
    expect(html).toMatch(/data-label="Compactions"[^>]*>2<\/td>/);
    expect(html).toContain('The summary covers 4 messages');
    expect(html).toContain(
      `<time datetime="${row.updated_at}">${formatTime(row.updated_at)}</time>`,
    );
    expect(html).toContain(
      `<time datetime="${row.created_at}">${formatTime(row.created_at)}</time>`,
    );
  });

  it('escapes a first message instead of rendering it as markup', () => {
    const html = renderToString(
      <SessionTable sessions={[session({ first_user_message: '<img src=x onerror=alert(1)>' })]} />,
    );
    expect(html).not.toContain('<img');
  });
});

describe('sessionHeading', () => {
  const system: Message = { seq: 1, role: 'system', content: 'You help.', compacted: false };
  const first: Message = {
    seq: 2,
    role: 'user',
    content: '  Plan a trip\nto Lyon  ',
    compacted: true,
  };

  it('is the title when there is one', () => {
    expect(sessionHeading(session({ title: 'Trip planning' }), [system, first])).toBe(
      'Trip planning',
    );
  });

  it('is the start of the first user message when untitled, compacted or not', () => {
    expect(sessionHeading(session({ first_user_message: undefined }), [system, first])).toBe(
      'Plan a trip to Lyon',
    );
  });

  it('names the agent and the start time of a session with nothing said yet, never the raw id', () => {
    const empty = session({ first_user_message: undefined });
    const heading = sessionHeading(empty, [system]);
    expect(heading).toBe(`Session with assistant, started ${formatTime(empty.created_at)}`);
    expect(heading).not.toContain(empty.id);
  });
});
