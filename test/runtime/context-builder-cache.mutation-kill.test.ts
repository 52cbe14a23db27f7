/**
 * The context builder's parts a wrong line would break unnoticed: a stored
 * message keeps exactly its tool fields on the way to the model; the overflow
 * fallback's summary stands in for everything before its seq; memory notes
 * are one more system message, and none when empty; appended system messages
 * stay system messages; and a load is kept for the next turn only when it is
 * known whole (nothing newer than the session row) and not too long.
 *
 * The store here is a loadContext of the test's own that counts its calls:
 * the builder's cache is what is under test, and a reload is the thing seen.
 */
import { describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import type { StoredMessage } from '../../src/llm/messages.js';
import {
  ContextBuilder,
  MAX_CACHED_TAIL_MESSAGES,
  SUMMARY_ACK,
  SUMMARY_PREFIX,
  toChatMessage,
} from '../../src/runtime/context-builder.js';
import type { SessionRow } from '../../src/store/store.js';

const agent = { name: 'assistant' } as AgentConfig;

function stored(seq: number, fields: Partial<StoredMessage>): StoredMessage {
  return {
    session_id: 's1',
    seq,
    created_at: '2026-12-01T00:00:00.000Z',
    role: 'user',
    content: `m${seq}`,
    ...fields,
  };
}

function sessionRow(lastSeq: number, fields: Partial<SessionRow> = {}): SessionRow {
  return {
    id: 's1',
    epoch: 0,
    compact_seq: 0,
    compact_summary: null,
    last_seq: lastSeq,
    ...fields,
  } as SessionRow;
}

/** A loadContext that answers with the given messages and counts its calls. */
function countingStore(system: StoredMessage[], tail: StoredMessage[]) {
  const store = {
    loads: 0,
    loadContext: () => {
      store.loads += 1;
      return Promise.resolve({ system: [...system], tail: [...tail] });
    },
  };
  return store;
}

describe('toChatMessage', () => {
  it('carries tool_calls, tool_call_id and name when set, and adds none of them otherwise', () => {
    const call = { id: 'c1', type: 'function' as const, function: { name: 'f', arguments: '{}' } };
    expect(
      toChatMessage(stored(2, { role: 'assistant', content: null, tool_calls: [call] })),
    ).toEqual({ role: 'assistant', content: null, tool_calls: [call] });
    expect(
      toChatMessage(stored(3, { role: 'tool', content: 'r', tool_call_id: 'c1', name: 'f' })),
    ).toEqual({ role: 'tool', content: 'r', tool_call_id: 'c1', name: 'f' });
    expect(Object.keys(toChatMessage(stored(4, {})))).toEqual(['role', 'content']);
  });
});

describe('ContextBuilder.build', () => {
  const system = [stored(1, { role: 'system', content: 'sys' })];
  const tail = [2, 3, 4, 5].map((seq) =>
    stored(seq, { role: seq % 2 === 0 ? 'user' : 'assistant' }),
  );

  it('stands the fallback summary in for every message before its seq', async () => {
    const builder = new ContextBuilder({ store: countingStore(system, tail) });
    const built = await builder.build(sessionRow(5, { compact_summary: 'old' }), agent, {
      summary: 'fresh',
      fromSeq: 4,
    });
    expect(built.summary).toBe('fresh');
    expect(built.tail.map((m) => m.seq)).toEqual([4, 5]);
    expect(built.messages).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: `${SUMMARY_PREFIX}fresh` },
      { role: 'assistant', content: SUMMARY_ACK },
      { role: 'user', content: 'm4' },
      { role: 'assistant', content: 'm5' },
    ]);
  });

  it('adds memory notes as one more system message, and nothing for empty notes', async () => {
    const withNotes = new ContextBuilder({
      store: countingStore(system, tail),
      systemContext: () => Promise.resolve('notes'),
    });
    const built = await withNotes.build(sessionRow(5), agent);
    expect(built.memory).toBe('notes');
    expect(built.messages.slice(0, 2)).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'system', content: 'notes' },
    ]);
    const empty = new ContextBuilder({
      store: countingStore(system, tail),
      systemContext: () => Promise.resolve(''),
    });
    expect(
      (await empty.build(sessionRow(5), agent)).messages.filter((m) => m.role === 'system'),
    ).toEqual([{ role: 'system', content: 'sys' }]);
  });
});

describe('ContextBuilder.appended', () => {
  it('ignores a session it has not loaded, and an empty list', async () => {
    const store = countingStore([], [stored(2, {})]);
    const builder = new ContextBuilder({ store });
    expect(() => builder.appended('s1', [stored(3, {})])).not.toThrow();
    await builder.build(sessionRow(2), agent);
    expect(() => builder.appended('s1', [])).not.toThrow();
    await builder.build(sessionRow(2), agent);
    expect(store.loads).toBe(1);
  });

  it('keeps an appended system message among the system messages, ahead of the summary', async () => {
    const store = countingStore([stored(1, { role: 'system', content: 'sys' })], [stored(2, {})]);
    const builder = new ContextBuilder({ store });
    await builder.build(sessionRow(2, { compact_summary: 'S' }), agent);
    builder.appended('s1', [stored(3, { role: 'system', content: 'later rule' })]);
    const built = await builder.build(sessionRow(3, { compact_summary: 'S' }), agent);
    expect(store.loads).toBe(1);
    expect(built.messages.map((m) => m.content)).toEqual([
      'sys',
      'later rule',
      `${SUMMARY_PREFIX}S`,
      SUMMARY_ACK,
      'm2',
    ]);
  });
});

describe('what the builder keeps between turns', () => {
  async function loadsForTwoBuilds(
    system: StoredMessage[],
    tail: StoredMessage[],
    lastSeq: number,
  ): Promise<number> {
    const store = countingStore(system, tail);
    const builder = new ContextBuilder({ store });
    await builder.build(sessionRow(lastSeq), agent);
    await builder.build(sessionRow(lastSeq), agent);
    return store.loads;
  }

  it('keeps a load whose newest message the session row accounts for', async () => {
    expect(await loadsForTwoBuilds([], [stored(2, {}), stored(3, {})], 3)).toBe(1);
    expect(await loadsForTwoBuilds([stored(1, { role: 'system' })], [], 1)).toBe(1);
  });

  it('reloads when a tail or a system message is newer than the session row read', async () => {
    const system = [stored(1, { role: 'system' })];
    expect(await loadsForTwoBuilds(system, [stored(2, {}), stored(3, {})], 2)).toBe(2);
    expect(await loadsForTwoBuilds([stored(4, { role: 'system' })], [stored(2, {})], 2)).toBe(2);
  });

  it('holds a tail of the longest kept length, and reloads a longer one each turn', async () => {
    const tail = (n: number) => Array.from({ length: n }, (_, i) => stored(i + 2, {}));
    expect(
      await loadsForTwoBuilds([], tail(MAX_CACHED_TAIL_MESSAGES), MAX_CACHED_TAIL_MESSAGES + 1),
    ).toBe(1);
    expect(
      await loadsForTwoBuilds([], tail(MAX_CACHED_TAIL_MESSAGES + 1), MAX_CACHED_TAIL_MESSAGES + 2),
    ).toBe(2);
  });
});
