/**
 * Whatever history Cairn holds — system messages anywhere, blank texts, tool
 * calls without results, results without calls, duplicated and foreign ids,
 * arguments that are not JSON, a summary pair, roles in any order — the
 * request it builds for the Anthropic Messages API is one the API accepts
 * (the fake's validator holds the API's rules), with at most four cache
 * breakpoints, and no non-blank user text is lost on the way.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { toAnthropicRequest } from '../../src/llm/anthropic-wire.js';
import type { ChatMessage, ToolCall } from '../../src/llm/messages.js';
import { SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import { contentBlocks, validateAnthropicRequest } from '../fakes/anthropic-request-validator.js';

const textArb = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('', ' ', '\n\t ') },
  { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 10 }) },
);
const idArb = fc.oneof(
  fc.constantFrom('call_0', 'call_1', 'toolu_01', ''),
  fc.string({ minLength: 1, maxLength: 60 }),
);
const argsArb = fc.oneof(
  fc.constantFrom('{}', '{"a":1}', '', '{"key":', '[1]', 'null', '"x"'),
  fc.json(),
);

const messageArb: fc.Arbitrary<ChatMessage[]> = fc.oneof(
  { weight: 1, arbitrary: textArb.map((content) => [{ role: 'system' as const, content }]) },
  { weight: 4, arbitrary: textArb.map((content) => [{ role: 'user' as const, content }]) },
  { weight: 2, arbitrary: textArb.map((content) => [{ role: 'assistant' as const, content }]) },
  {
    weight: 1,
    arbitrary: textArb.map((summary) => [
      { role: 'user' as const, content: SUMMARY_PREFIX + summary },
      { role: 'assistant' as const, content: SUMMARY_ACK },
    ]),
  },
  {
    weight: 4,
    arbitrary: fc
      .record({
        text: fc.option(textArb, { nil: null }),
        calls: fc.array(fc.record({ id: idArb, args: argsArb }), { minLength: 1, maxLength: 3 }),
        results: fc.array(fc.record({ call: fc.nat(4), text: textArb }), { maxLength: 4 }),
      })
      .map(({ text, calls, results }) => {
        const toolCalls = calls.map((c, i): ToolCall => ({
          id: c.id,
          type: 'function',
          function: { name: `tool_${i}`, arguments: c.args },
        }));
        return [
          { role: 'assistant' as const, content: text, tool_calls: toolCalls },
          ...results.map((r) => {
            const target = toolCalls[r.call % toolCalls.length]!;
            return {
              role: 'tool' as const,
              tool_call_id: target.id,
              name: target.function.name,
              content: r.text,
            };
          }),
        ];
      }),
  },
  {
    weight: 1,
    arbitrary: fc
      .record({ id: idArb, text: textArb })
      .map(({ id, text }) => [{ role: 'tool' as const, tool_call_id: id, content: text }]),
  },
);

const historyArb = fc.array(messageArb, { maxLength: 14 }).map((parts) => parts.flat());

function cacheMarks(body: ReturnType<typeof toAnthropicRequest>): number {
  const blocks = [...body.system, ...body.messages.flatMap((m) => contentBlocks(m.content))] as {
    cache_control?: unknown;
  }[];
  return blocks.filter((b) => b.cache_control !== undefined).length;
}

describe('the Anthropic request built from any history', () => {
  it('is accepted by the API’s rules, with at most four cache breakpoints', () => {
    fc.assert(
      fc.property(historyArb, (history) => {
        const wire = toAnthropicRequest(
          history,
          [{ name: 'tool_0', description: 'd', parameters: { type: 'object', properties: {} } }],
          {
            isSummary: (m) => (m.content ?? '').startsWith(SUMMARY_PREFIX),
            // Any message may be taken for a per-call one: the marks stay within the limit.
            isPerCall: (m) => m.role === 'user' && (m.content ?? '').length % 3 === 0,
          },
        );
        const body = {
          model: 'claude-test',
          max_tokens: 100,
          ...(wire.system.length > 0 ? { system: wire.system } : {}),
          messages: wire.messages,
          tools: wire.tools,
        };
        expect(validateAnthropicRequest(body)).toEqual([]);
        expect(cacheMarks(wire)).toBeLessThanOrEqual(4);
        // Every non-blank user text reaches the model, in order.
        const sentTexts = wire.messages
          .filter((m) => m.role === 'user')
          .flatMap((m) => contentBlocks(m.content))
          .filter((b) => b.type === 'text')
          .map((b) => b.text);
        const userTexts = history
          .filter((m) => m.role === 'user' && (m.content ?? '').trim() !== '')
          .map((m) => m.content);
        expect(sentTexts.filter((t) => userTexts.includes(t as string))).toEqual(userTexts);
      }),
      { numRuns: 2_000 },
    );
  });

  it('the validator is not vacuous: the raw histories it would refuse are common', () => {
    let refused = 0;
    fc.assert(
      fc.property(historyArb, (history) => {
        const naive = history
          .filter((m) => m.role !== 'system')
          .map((m) => ({
            role: m.role === 'assistant' ? 'assistant' : 'user',
            content: m.content ?? '',
          }));
        if (validateAnthropicRequest({ model: 'm', max_tokens: 1, messages: naive }).length > 0)
          refused += 1;
      }),
      { numRuns: 300 },
    );
    expect(refused).toBeGreaterThan(150);
  });
});
