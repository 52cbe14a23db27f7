/**
 * An assistant message with an empty `tool_calls` list is an ordinary message
 * on the wire: it goes out without the field (a provider may reject an empty
 * list), and with no text it is not sent at all.
 */
import { describe, expect, it } from 'vitest';
import { normalizeOutgoing } from '../../src/llm/normalize-request.js';
import type { ChatMessage } from '../../src/llm/messages.js';

describe('normalizeOutgoing with an empty tool_calls list', () => {
  it('sends the assistant text without a tool_calls field', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'question' },
      { role: 'assistant', content: 'answer', tool_calls: [] },
      { role: 'user', content: 'follow-up' },
    ];
    const out = normalizeOutgoing(messages);
    expect(out).toEqual([
      { role: 'user', content: 'question' },
      { role: 'assistant', content: 'answer' },
      { role: 'user', content: 'follow-up' },
    ]);
    expect('tool_calls' in out[1]!).toBe(false);
  });

  it('drops an assistant message with an empty tool_calls list and no text', () => {
    const out = normalizeOutgoing([
      { role: 'user', content: 'question' },
      { role: 'assistant', content: null, tool_calls: [] },
      { role: 'user', content: 'again' },
    ]);
    expect(out).toEqual([
      { role: 'user', content: 'question' },
      { role: 'user', content: 'again' },
    ]);
  });

  it('does not bridge a first assistant message whose tool_calls list is empty', () => {
    const out = normalizeOutgoing([
      { role: 'system', content: 'sys' },
      { role: 'assistant', content: 'hello', tool_calls: [] },
    ]);
    expect(out).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'assistant', content: 'hello' },
    ]);
  });
});
