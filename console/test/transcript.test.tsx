/** The transcript: tool calls folded with their results, the compacted prefix set apart. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Transcript } from '../src/components/Transcript';
import { summaryCoversLabel, transcriptModel } from '../src/lib/transcript';
import type { Message } from '../src/lib/types';

function msg(
  seq: number,
  role: Message['role'],
  content: string | null,
  extra: Partial<Message> = {},
): Message {
  return { seq, role, content, compacted: false, ...extra };
}

const CALL = {
  id: 'call_1',
  type: 'function' as const,
  function: { name: 'current_time', arguments: '{}' },
};

const HISTORY: Message[] = [
  msg(1, 'system', 'You are a test assistant.'),
  msg(2, 'user', 'first question', { compacted: true }),
  msg(3, 'assistant', null, { compacted: true, tool_calls: [CALL] }),
  msg(4, 'tool', '12:00', { compacted: true, tool_call_id: 'call_1', name: 'current_time' }),
  msg(5, 'assistant', 'It is noon.', { compacted: true }),
  msg(6, 'user', 'second question'),
  msg(7, 'assistant', 'Second answer.'),
];

describe('transcriptModel', () => {
  it('folds a tool result into its call and splits compacted from live', () => {
    const model = transcriptModel(HISTORY);
    expect(model.system).toEqual([
      { kind: 'text', seq: 1, role: 'system', text: 'You are a test assistant.' },
    ]);
    expect(model.compacted).toEqual([
      { kind: 'text', seq: 2, role: 'user', text: 'first question' },
      {
        kind: 'tool',
        seq: 3,
        callId: 'call_1',
        name: 'current_time',
        arguments: '{}',
        result: { content: '12:00', seq: 4 },
      },
      { kind: 'text', seq: 5, role: 'assistant', text: 'It is noon.' },
    ]);
    expect(model.live.map((b) => b.seq)).toEqual([6, 7]);
  });

  it('shows a call still running without a result, and a result without its call on its own', () => {
    const model = transcriptModel([
      msg(2, 'assistant', 'Let me check.', { tool_calls: [CALL] }),
      msg(3, 'tool', 'orphan', { tool_call_id: 'call_gone', name: 'lost' }),
    ]);
    expect(model.live).toEqual([
      { kind: 'text', seq: 2, role: 'assistant', text: 'Let me check.' },
      { kind: 'tool', seq: 2, callId: 'call_1', name: 'current_time', arguments: '{}' },
      {
        kind: 'tool',
        seq: 3,
        callId: 'call_gone',
        name: 'lost',
        arguments: '',
        result: { content: 'orphan', seq: 3 },
      },
    ]);
  });

  it('says how many messages the summary covers', () => {
    expect(summaryCoversLabel(4)).toBe('Summary covers 4 messages');
    expect(summaryCoversLabel(1)).toBe('Summary covers 1 message');
  });
});

describe('<Transcript>', () => {
  it('sets the compacted prefix apart behind the divider, with the summary after it', () => {
    const html = renderToString(
      <Transcript messages={HISTORY} compactSize={4} summary="They asked the time." />,
    );
    const divider = html.indexOf('Summary covers 4 messages');
    const summary = html.indexOf('They asked the time.');
    const compacted = html.indexOf('first question');
    const live = html.indexOf('second question');
    expect(divider).toBeGreaterThan(-1);
    // The folded prefix sits inside the divider's <details>, before the summary and the live tail.
    expect(compacted).toBeGreaterThan(divider);
    expect(summary).toBeGreaterThan(compacted);
    expect(live).toBeGreaterThan(summary);
    expect(html).toContain('Tool call: <code>current_time</code>');
    expect(html).not.toContain('<details open');
  });

  it('has no divider and no summary before the first compaction', () => {
    const html = renderToString(
      <Transcript
        messages={HISTORY.map((m) => ({ ...m, compacted: false }))}
        compactSize={0}
        summary={null}
      />,
    );
    expect(html).not.toContain('Summary covers');
    expect(html).toContain('first question');
  });

  it('escapes message text instead of rendering it as markup', () => {
    const html = renderToString(
      <Transcript
        messages={[msg(2, 'user', '<img src=x onerror=alert(1)>')]}
        compactSize={0}
        summary={null}
      />,
    );
    expect(html).not.toContain('<img');
    expect(html).toContain('&lt;img');
  });
});

describe('Fork from here', () => {
  it('is offered on user and assistant messages, not on system messages or tool calls, when forking is possible', () => {
    const html = renderToString(
      <Transcript messages={HISTORY} compactSize={4} summary="S" onFork={() => undefined} />,
    );
    // Messages 2, 5, 6 and 7 are texts of the user or the assistant.
    expect(html.match(/Fork from here/g)).toHaveLength(4);
    expect(html).not.toMatch(/data-seq="1"[^>]*>(?:(?!<\/li>).)*Fork from here/s);
    const without = renderToString(<Transcript messages={HISTORY} compactSize={4} summary="S" />);
    expect(without).not.toContain('Fork from here');
  });
});

describe('recalled messages under a reply', () => {
  it('shows which compacted messages were recalled for a reply, and nothing under the others', () => {
    const html = renderToString(
      <Transcript
        messages={HISTORY}
        compactSize={4}
        summary="They asked twice."
        recalled={new Map([[7, [2, 5]]])}
      />,
    );
    expect(html).toContain('Recalled #2, #5');
    expect(html.match(/class="recalled"/g)).toHaveLength(1);
    const reply = html.slice(html.indexOf('data-seq="7"'));
    expect(reply).toContain('Recalled #2, #5');
  });

  it('without recall the transcript has no such note', () => {
    const html = renderToString(
      <Transcript messages={HISTORY} compactSize={4} summary="They asked twice." />,
    );
    expect(html).not.toContain('Recalled');
  });
});
