/**
 * The request normaliser's edges that a wrong line would break with the rest
 * of the suite still green. An assistant message with an empty `tool_calls`
 * list is an ordinary message on the wire: it goes out without the field (a
 * provider may reject an empty list), and with no text it is not sent at all.
 * Ids a provider would refuse are replaced by stable ones, arguments that are
 * not a JSON object are replayed as `{}`, blank text counts as empty, the
 * first result per call is the one kept, and only the last turn's unanswered
 * calls get synthetic results.
 */
import { describe, expect, it } from 'vitest';
import {
  EMPTY_TOOL_RESULT,
  INTERRUPTED_TOOL_RESULT,
  MAX_TOOL_CALL_ID_CHARS,
  missingTrailingResults,
  normalizeOutgoing,
  normalizeToolCallId,
  wireArguments,
} from '../../src/llm/normalize-request.js';
import type { ChatMessage } from '../../src/llm/messages.js';

function call(id: string, args = '{}'): NonNullable<ChatMessage['tool_calls']>[number] {
  return { id, type: 'function', function: { name: 'lookup', arguments: args } };
}

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

describe('tool call ids', () => {
  it('keeps an id a provider accepts and replaces an empty, foreign or over-long one, stably', () => {
    expect(normalizeToolCallId('call_abc-1')).toBe('call_abc-1');
    const atLimit = 'a'.repeat(MAX_TOOL_CALL_ID_CHARS);
    expect(normalizeToolCallId(atLimit)).toBe(atLimit);
    for (const bad of ['', 'call 1', 'call.1', 'a'.repeat(MAX_TOOL_CALL_ID_CHARS + 1)]) {
      const replaced = normalizeToolCallId(bad);
      expect(replaced).toMatch(/^call_[A-Za-z0-9_-]{32}$/);
      expect(replaced).not.toBe(bad);
      expect(normalizeToolCallId(bad)).toBe(replaced);
    }
    expect(normalizeToolCallId('')).not.toBe(normalizeToolCallId('call 1'));
  });

  it('pairs a result without an id with a call whose id was empty (both stand for the same id)', () => {
    const out = normalizeOutgoing([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call('')] },
      { role: 'tool', content: 'found it' },
    ]);
    expect(out[2]).toMatchObject({ role: 'tool', content: 'found it' });
    expect(out[2]!.tool_call_id).toBe(out[1]!.tool_calls![0]!.id);
  });
});

describe('tool call arguments on replay', () => {
  it('replays a JSON object as sent, and anything else as {}', () => {
    expect(wireArguments('{"city":"Lyon"}')).toBe('{"city":"Lyon"}');
    expect(wireArguments('{}')).toBe('{}');
    for (const bad of ['[1]', 'null', '3', '"x"', 'true', '{"key":', '']) {
      expect(wireArguments(bad), bad).toBe('{}');
    }
  });
});

describe('blank text', () => {
  it('drops a whitespace-only message and gives a whitespace-only tool result the empty marker', () => {
    const out = normalizeOutgoing([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: '  \n ', tool_calls: [call('c1')] },
      { role: 'tool', tool_call_id: 'c1', content: ' \t ' },
      { role: 'user', content: '   ' },
      { role: 'assistant', content: 'done' },
    ]);
    expect(out).toEqual([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call('c1')] },
      { role: 'tool', tool_call_id: 'c1', content: EMPTY_TOOL_RESULT },
      { role: 'assistant', content: 'done' },
    ]);
  });
});

describe('absent text', () => {
  it('sends an assistant call with no content field as content null, and drops a message without content', () => {
    const out = normalizeOutgoing([
      { role: 'user', content: 'go' },
      { role: 'assistant', tool_calls: [call('c1')] } as ChatMessage,
      { role: 'tool', tool_call_id: 'c1' } as ChatMessage,
      { role: 'user' } as ChatMessage,
    ]);
    expect(out).toEqual([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call('c1')] },
      { role: 'tool', tool_call_id: 'c1', content: EMPTY_TOOL_RESULT },
    ]);
  });
});

describe('tool results after a call', () => {
  it('keeps the first result per call, without a name field it did not have', () => {
    const out = normalizeOutgoing([
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call('c1')] },
      { role: 'tool', tool_call_id: 'c1', content: 'first' },
      { role: 'tool', tool_call_id: 'c1', content: 'second' },
      { role: 'tool', tool_call_id: 'other', content: 'stray' },
    ]);
    expect(out).toHaveLength(3);
    expect(out[2]).toEqual({ role: 'tool', tool_call_id: 'c1', content: 'first' });
    expect(Object.keys(out[2]!)).not.toContain('name');
  });

  it('treats tool_calls only on an assistant message as calls', () => {
    const strange = {
      role: 'user',
      content: 'hello',
      tool_calls: [call('c1')],
    } as ChatMessage;
    expect(normalizeOutgoing([strange])).toEqual([{ role: 'user', content: 'hello' }]);
    expect(missingTrailingResults([strange])).toEqual([]);
  });
});

describe('missingTrailingResults', () => {
  it('looks only at results after the last assistant message, even when an earlier turn reused the id', () => {
    const messages: ChatMessage[] = [
      { role: 'user', content: 'first' },
      { role: 'assistant', content: null, tool_calls: [call('c1')] },
      { role: 'tool', tool_call_id: 'c1', content: 'answered' },
      { role: 'user', content: 'again' },
      { role: 'assistant', content: null, tool_calls: [call('c1')] },
    ];
    expect(missingTrailingResults(messages)).toEqual([
      { role: 'tool', tool_call_id: 'c1', name: 'lookup', content: INTERRUPTED_TOOL_RESULT },
    ]);
  });
});
