/**
 * Automatic compaction's estimate is of the request as sent: when a call
 * clears old tool results (a new batch, or results stored since the last
 * call), the last call's reported prompt plus what was stored since is
 * lowered by what the call no longer sends, so the threshold is not crossed
 * by text the model will never get.
 */
import { describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import { AutoCompaction, recallReserve } from '../../src/compaction/auto-compaction.js';
import type { ChatMessage, StoredMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import type { GuardedTurn } from '../../src/runtime/context-guard.js';
import { clearingPolicy, ToolResultClearing } from '../../src/runtime/tool-result-clearing.js';
import type { SessionRow } from '../../src/store/store.js';

const RECALL = { enabled: true, maxMessages: 6, maxTokens: 1_200, minScore: 0.5 };

function result(id: string): ChatMessage[] {
  return [
    {
      role: 'assistant',
      content: null,
      tool_calls: [{ id, type: 'function', function: { name: 'read_report', arguments: '{}' } }],
    },
    {
      role: 'tool',
      tool_call_id: id,
      name: 'read_report',
      content: `${id}:${' data'.repeat(400)}`,
    },
  ];
}

/** A stored form of `messages` (seq 2 on; the system prompt is seq 1). */
function stored(messages: readonly ChatMessage[]): StoredMessage[] {
  return messages.map((m, i) => ({ ...m, session_id: 's', seq: i + 2, created_at: 'now' }));
}

/**
 * A turn over `messages` whose last call sent the first `sentBefore` of them
 * and reported exactly what the tokenizer counts of that request as sent.
 */
function turnOver(
  messages: ChatMessage[],
  sentBefore: number,
  clearing: ToolResultClearing | null,
): GuardedTurn {
  const before = messages.slice(0, sentBefore);
  const reported = estimateMessagesTokens(
    clearing ? clearing.apply(before, clearing.plan(before)) : before,
  );
  const tail = stored(messages.slice(1));
  const session = {
    id: 's',
    compact_seq: 0,
    last_prompt_tokens: reported,
    // The system prompt is seq 1: the last call's prompt ended at message sentBefore.
    last_prompt_seq: sentBefore,
  } as SessionRow;
  return {
    session,
    agent: { defaultCompaction: { recall: RECALL } } as AgentConfig,
    clearing,
    forRequest: (m: readonly ChatMessage[]) =>
      clearing ? clearing.apply(m, clearing.plan(m)) : [...m],
    messagesAfter: async (seq: number) => tail.filter((m) => m.seq > seq),
  } as unknown as GuardedTurn;
}

const guard = new AutoCompaction({
  compaction: {} as never,
  contextWindow: 8_000,
});

describe("the guard's estimate", () => {
  // keepLast 1, batch 800 tokens (a tenth of 8 000): two 400-token results make a batch.
  const policy = clearingPolicy({ keepLast: 1, minTokens: 100 }, 8_000, true)!;
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You read reports.' },
    { role: 'user', content: 'read them all' },
    ...result('a'),
    ...result('b'),
    ...result('c'),
  ];

  it('takes off a batch the last call sent whole and this one clears', async () => {
    const clearing = new ToolResultClearing(policy);
    // The last call had a and b, both whole (only a was old: 400 < 800);
    // now c pushes b out too and a and b go as one batch.
    const sentBefore = 6;
    expect(clearing.plan(messages.slice(0, sentBefore))).toEqual([]);
    expect(clearing.plan(messages).map((r) => r.toolCallId)).toEqual(['a', 'b']);
    const turn = turnOver(messages, sentBefore, clearing);
    const asSent = estimateMessagesTokens(clearing.apply(messages, clearing.plan(messages)));
    expect(await guard.estimate(turn, messages)).toBe(asSent);
    expect(asSent).toBeLessThan(estimateMessagesTokens(messages) - 600);
  });

  it('counts every result whole when clearing is off', async () => {
    const turn = turnOver(messages, 6, null);
    expect(await guard.estimate(turn, messages)).toBe(estimateMessagesTokens(messages));
  });

  it('with no reported prompt, counts the request as sent', async () => {
    const clearing = new ToolResultClearing(policy);
    const turn = turnOver(messages, 6, clearing);
    const fresh = {
      ...turn,
      session: { ...turn.session, last_prompt_tokens: null, last_prompt_seq: null },
    } as GuardedTurn;
    expect(await guard.estimate(fresh, messages)).toBe(
      estimateMessagesTokens(clearing.apply(messages, clearing.plan(messages))),
    );
  });

  it('keeps room for recall once a call clears results, compacted or not', () => {
    const agent = { defaultCompaction: { recall: RECALL } } as AgentConfig;
    expect(recallReserve(agent, { compact_seq: 0 }, 6_400)).toBe(0);
    expect(recallReserve(agent, { compact_seq: 0 }, 6_400, true)).toBe(1_200);
  });
});
