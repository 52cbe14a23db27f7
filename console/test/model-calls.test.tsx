/** "What the model saw": matching calls to replies, marking what Cairn injected, rendering. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Transcript } from '../src/components/Transcript';
import { SentRequest } from '../src/components/WhatTheModelSaw';
import { Api } from '../src/lib/api';
import {
  callLine,
  callsByMessage,
  sentKind,
  type CallRecord,
  type CallSummary,
} from '../src/lib/model-calls';
import type { Message } from '../src/lib/types';

function msg(
  seq: number,
  role: Message['role'],
  content: string | null,
  extra: Partial<Message> = {},
): Message {
  return { seq, role, content, compacted: false, ...extra };
}

let n = 0;
function call(fields: Partial<CallSummary>): CallSummary {
  n += 1;
  return {
    id: `call_${String(n).padStart(4, '0')}`,
    role: 'main',
    turn_seq: 2,
    model: 'm',
    created_at: `2026-01-01T00:00:${String(n).padStart(2, '0')}.000Z`,
    latency_ms: 812.4,
    input_tokens: 1840,
    output_tokens: 62,
    cached_tokens: 1536,
    cost: 0.000513,
    finish_reason: 'stop',
    response: { content: 'Hello.' },
    error: null,
    ...fields,
  };
}

const TOOL = {
  id: 'call_t1',
  type: 'function' as const,
  function: { name: 'current_time', arguments: '{}' },
};

describe('callsByMessage', () => {
  it('finds the call behind each reply, in order, skipping calls whose reply was not stored', () => {
    const messages = [
      msg(1, 'system', 'S'),
      msg(2, 'user', 'time?'),
      msg(3, 'assistant', null, { tool_calls: [TOOL] }),
      msg(4, 'tool', '12:00', { tool_call_id: 'call_t1' }),
      msg(5, 'assistant', 'It is noon.'),
      msg(6, 'user', 'again'),
      msg(7, 'assistant', 'It is noon.'),
    ];
    const toolCall = call({
      response: { content: null, tool_calls: [TOOL] },
      finish_reason: 'tool_calls',
    });
    const empty = call({ response: { content: '' } });
    const failed = call({ response: null, error: { code: 'LLM_ERROR', message: 'x' } });
    const answer = call({ response: { content: 'It is noon.' } });
    const title = call({ role: 'title', response: { content: 'It is noon.' } });
    const second = call({ turn_seq: 6, response: { content: 'It is noon.' } });
    // Listed newest first, as the API does.
    const found = callsByMessage(messages, [second, title, answer, failed, empty, toolCall]);
    expect(found.get(3)?.id).toBe(toolCall.id);
    expect(found.get(5)?.id).toBe(answer.id);
    expect(found.get(7)?.id).toBe(second.id);
    expect(found.size).toBe(3);
  });

  it('gives a reply no call when its turn has none on record', () => {
    const later = call({ turn_seq: 9, response: { content: 'Old reply.' } });
    expect(callsByMessage([msg(3, 'assistant', 'Old reply.')], [later]).size).toBe(0);
  });
});

describe('sentKind', () => {
  it('marks the summary pair, recalled messages, memory notes and the system prompt', () => {
    expect(
      sentKind({ role: 'user', content: '[Summary of previous conversation]\n\nGoal: …' }),
    ).toBe('summary');
    expect(
      sentKind({
        role: 'assistant',
        content: 'Understood. I have the context from the summary above.',
      }),
    ).toBe('summary');
    expect(sentKind({ role: 'user', content: '<recalled_messages>\n…' })).toBe('recall');
    expect(
      sentKind({ role: 'system', content: 'You help.\n<memory_notes>\n</memory_notes>' }),
    ).toBe('memory');
    expect(sentKind({ role: 'system', content: 'You help.' })).toBe('system');
    expect(sentKind({ role: 'user', content: 'hello' })).toBe('conversation');
  });
});

describe('rendering', () => {
  const api = new Api({
    onUnauthorized: () => undefined,
    storage: { getItem: () => null, setItem: () => undefined, removeItem: () => undefined },
  });

  it('shows tokens, cost and latency under the reply the call produced', () => {
    const reply = call({ response: { content: 'Hi there.' } });
    const messages = [msg(2, 'user', 'hi'), msg(3, 'assistant', 'Hi there.')];
    const html = renderToString(
      <Transcript
        messages={messages}
        compactSize={0}
        summary={null}
        calls={{ bySeq: callsByMessage(messages, [reply]), api }}
      />,
    );
    expect(html).toContain('What the model saw');
    expect(html).toContain(callLine(reply));
    expect(callLine(reply)).toBe('1,840 in (1,536 cached) · 62 out · cost 0.000513 · 812 ms');
  });

  it('shows the request as sent with the injected blocks marked', () => {
    const record: CallRecord = {
      ...call({}),
      wire: true,
      request: {
        model: 'gpt-test',
        messages: [
          { role: 'system', content: 'You help.' },
          { role: 'user', content: '[Summary of previous conversation]\n\nThe user likes tea.' },
          { role: 'assistant', content: 'Understood. I have the context from the summary above.' },
          { role: 'user', content: 'And coffee?' },
        ],
        tools: [{}],
      },
    };
    const html = renderToString(<SentRequest record={record} />);
    expect(html).toContain('As sent to');
    expect(html).toContain('gpt-test');
    expect(html.match(/sent-summary/g)).toHaveLength(2);
    expect(html).toContain('The user likes tea.');
    expect(html).toContain('4 messages, 1 tools');
  });
});
