/**
 * After a compaction: the note that explains a raw tail starting mid-exchange;
 * and every tool call's two halves labelled "Arguments" and "Result".
 */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Transcript } from '../src/components/Transcript';
import { readableToolText, tailStartNote } from '../src/lib/transcript';
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
  id: 'call_7',
  type: 'function' as const,
  function: { name: 'current_time', arguments: '{"timezone":"Europe/Paris"}' },
};

/** The cut fell after the user's question: the tail starts with the tool call it led to. */
const MID_EXCHANGE: Message[] = [
  msg(1, 'system', 'You are a test assistant.'),
  msg(2, 'user', 'hello', { compacted: true }),
  msg(3, 'assistant', 'Hi.', { compacted: true }),
  msg(4, 'user', 'what time is it in Paris?', { compacted: true }),
  msg(5, 'assistant', null, { tool_calls: [CALL] }),
  msg(6, 'tool', '{"time":"12:00","timezone":"Europe/Paris"}', {
    tool_call_id: 'call_7',
    name: 'current_time',
  }),
  msg(7, 'assistant', 'It is noon in Paris.'),
];

describe('tailStartNote', () => {
  it('explains a tail that starts with a tool call', () => {
    expect(tailStartNote(MID_EXCHANGE, 3)).toBe(
      'This part starts with a tool call: the request that led to it is in the summary above (open the compacted messages to read it).',
    );
  });

  it('explains a tail that starts with a reply or a tool result', () => {
    const reply = [msg(2, 'user', 'q', { compacted: true }), msg(3, 'assistant', 'answer')];
    expect(tailStartNote(reply, 1)).toMatch(
      /^This part starts with a reply: the message it answers/,
    );
    const result = [
      msg(2, 'assistant', null, { compacted: true, tool_calls: [CALL] }),
      msg(3, 'tool', '12:00', { tool_call_id: 'call_7' }),
    ];
    expect(tailStartNote(result, 1)).toMatch(
      /^This part starts with a tool result: the call it answers/,
    );
  });

  it('says nothing when the tail starts with a user message, is empty, or nothing was compacted', () => {
    const clean = [
      msg(2, 'user', 'a', { compacted: true }),
      msg(3, 'assistant', 'b', { compacted: true }),
      msg(4, 'user', 'c'),
    ];
    expect(tailStartNote(clean, 2)).toBeUndefined();
    expect(tailStartNote(clean.slice(0, 2), 2)).toBeUndefined();
    expect(tailStartNote([msg(2, 'assistant', 'b')], 0)).toBeUndefined();
  });
});

describe('<Transcript> after a compaction that cut mid-exchange', () => {
  it('puts the note after the summary, before the tail', () => {
    const html = renderToString(
      <Transcript
        messages={MID_EXCHANGE}
        compactSize={3}
        summary="They greeted and asked the time."
      />,
    );
    const summary = html.indexOf('They greeted and asked the time.');
    const note = html.indexOf('the request that led to it is in the summary above');
    const tail = html.indexOf('It is noon in Paris.');
    expect(summary).toBeGreaterThan(-1);
    expect(note).toBeGreaterThan(summary);
    expect(tail).toBeGreaterThan(note);
    expect(html).toContain('role="note"');
  });

  it('has no note when the tail starts with the user', () => {
    const html = renderToString(
      <Transcript
        messages={MID_EXCHANGE.map((m) => (m.seq === 4 ? { ...m, compacted: false } : m))}
        compactSize={2}
        summary="They greeted."
      />,
    );
    expect(html).not.toContain('This part starts with');
  });
});

describe('a tool call', () => {
  it('labels its arguments and its result, each readable', () => {
    const html = renderToString(
      <Transcript messages={MID_EXCHANGE} compactSize={0} summary={null} />,
    );
    const args = html.indexOf('<h4 class="tool-label">Arguments</h4>');
    const result = html.indexOf('<h4 class="tool-label">Result</h4>');
    expect(args).toBeGreaterThan(-1);
    expect(result).toBeGreaterThan(args);
    // JSON is indented for reading (quotes escaped in the markup).
    expect(html).toContain('{\n  &quot;timezone&quot;: &quot;Europe/Paris&quot;\n}');
    expect(html).toContain('&quot;time&quot;: &quot;12:00&quot;');
  });

  it('says so when the result is not there yet, and when the call itself was compacted away', () => {
    const running = renderToString(
      <Transcript
        messages={[msg(2, 'assistant', null, { tool_calls: [CALL] })]}
        compactSize={0}
        summary={null}
      />,
    );
    expect(running).toContain('<h4 class="tool-label">Result</h4>');
    expect(running).toContain('None yet: the tool is running, or its result was never stored.');
    const orphan = renderToString(
      <Transcript
        messages={[
          msg(3, 'tool', 'plain text result', { tool_call_id: 'call_gone', name: 'lost' }),
        ]}
        compactSize={0}
        summary={null}
      />,
    );
    expect(orphan).toContain('The call is not in this part of the transcript.');
    expect(orphan).toContain('plain text result');
  });

  it('keeps arguments that are not JSON as the model sent them', () => {
    expect(readableToolText('{"a":1')).toBe('{"a":1');
    expect(readableToolText('[1,2]')).toBe('[\n  1,\n  2\n]');
    expect(readableToolText('12:00')).toBe('12:00');
  });
});
