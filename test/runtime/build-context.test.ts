/**
 * Summary injection (a user + assistant pair after the system messages, so
 * roles still alternate for strict providers): the exact, byte-stable texts of
 * the injected pair, where it goes, when the acknowledgement is left out, and
 * that nothing changes without a summary.
 */
import { describe, expect, it } from 'vitest';
import {
  buildMessagesWithSummary,
  SUMMARY_ACK,
  SUMMARY_PREFIX,
  summaryMessages,
} from '../../src/runtime/context-builder.js';
import type { ChatMessage } from '../../src/llm/messages.js';

const system: ChatMessage = { role: 'system', content: 'You are a test assistant.' };
const memory: ChatMessage = { role: 'system', content: 'Memory: the user likes tea.' };
const question: ChatMessage = { role: 'user', content: 'What did we decide?' };
const answer: ChatMessage = { role: 'assistant', content: 'We chose plan B.' };
const calling: ChatMessage = {
  role: 'assistant',
  content: null,
  tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }],
};
const toolResult: ChatMessage = { role: 'tool', tool_call_id: 'call_1', name: 'f', content: 'ok' };

describe('buildMessagesWithSummary', () => {
  it('uses the exact texts of the report, byte for byte', () => {
    expect(SUMMARY_PREFIX).toBe('[Summary of previous conversation]\n\n');
    expect(SUMMARY_ACK).toBe('Understood. I have the context from the summary above.');
    expect(buildMessagesWithSummary([system], [question], 'Goals: ship v1.')).toEqual([
      system,
      { role: 'user', content: '[Summary of previous conversation]\n\nGoals: ship v1.' },
      { role: 'assistant', content: 'Understood. I have the context from the summary above.' },
      question,
    ]);
  });

  it('keeps the summary text as is (no trimming, no escaping)', () => {
    const summary = '  Line 1\n\n* "quoted" <tag> & ünïcode \u{1F600}\n';
    const [, injected] = buildMessagesWithSummary([system], [question], summary);
    expect(injected).toEqual({ role: 'user', content: SUMMARY_PREFIX + summary });
  });

  it('keeps every system message first, in order, and the tail after the pair, in order', () => {
    const tail = [question, answer, { role: 'user', content: 'And then?' } as ChatMessage];
    const built = buildMessagesWithSummary([system, memory], tail, 'S');
    expect(built.map((m) => m.role)).toEqual([
      'system',
      'system',
      'user',
      'assistant',
      'user',
      'assistant',
      'user',
    ]);
    expect(built.slice(0, 2)).toEqual([system, memory]);
    expect(built.slice(4)).toEqual(tail);
  });

  it('leaves the acknowledgement out when the tail starts with an assistant message', () => {
    expect(buildMessagesWithSummary([system], [answer, question], 'S')).toEqual([
      system,
      { role: 'user', content: `${SUMMARY_PREFIX}S` },
      answer,
      question,
    ]);
    // Also when that assistant message calls tools: its results follow it directly.
    expect(buildMessagesWithSummary([system], [calling, toolResult], 'S')).toEqual([
      system,
      { role: 'user', content: `${SUMMARY_PREFIX}S` },
      calling,
      toolResult,
    ]);
  });

  it('adds the acknowledgement when the tail is empty (the new user message follows it)', () => {
    expect(buildMessagesWithSummary([system], [], 'S')).toEqual([
      system,
      { role: 'user', content: `${SUMMARY_PREFIX}S` },
      { role: 'assistant', content: SUMMARY_ACK },
    ]);
  });

  it('returns the messages unchanged with no summary (null or empty)', () => {
    const tail = [question, answer];
    for (const summary of [null, '']) {
      const built = buildMessagesWithSummary([system], tail, summary);
      expect(built).toEqual([system, question, answer]);
      expect(summaryMessages(summary, question)).toEqual([]);
    }
  });

  it('never modifies its inputs', () => {
    const systems = [system];
    const tail = [question];
    const built = buildMessagesWithSummary(systems, tail, 'S');
    built.push(answer);
    expect(systems).toEqual([system]);
    expect(tail).toEqual([question]);
  });
});
