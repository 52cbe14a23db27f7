/**
 * The turn on its own, over a real SQLite file, the real context builder and
 * event bus: what `begin` stores and where the turn starts, what `persist`
 * passes to the store and the stream, when `prepare` re-reads the session and
 * rebuilds, how a recalled block is swapped between calls, what the guard's
 * view of the turn (`messagesAfter`, `historyBeforeTurn`, `rebuildWithSummary`)
 * returns, and how compactions and recalls are summed for the chat envelope.
 * The guard and the recall are small scripted implementations of their seams.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import type { ChatMessage, StoredMessage } from '../../src/llm/messages.js';
import { INTERRUPTED_TOOL_RESULT } from '../../src/llm/normalize-request.js';
import { ContextBuilder, SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import type {
  ContextGuard,
  ContextRecall,
  GuardedTurn,
  RecallDone,
} from '../../src/runtime/context-guard.js';
import { EventBus } from '../../src/runtime/event-bus.js';
import { Turn, type TurnDeps } from '../../src/runtime/turn.js';
import { TurnWriter, type TurnWrites } from '../../src/runtime/turn-writes.js';
import type { EventRow, SessionRow } from '../../src/store/store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

// Without a systemContext the builder never reads the agent.
const agent = { name: 'assistant' } as AgentConfig;

/** Each message as `role:content`, which is all these tests compare. */
const lines = (messages: readonly ChatMessage[]): string[] =>
  messages.map((m) => `${m.role}:${m.content ?? ''}`);

let dir: string;
let store: SqliteStore;
let events: EventBus;
let context: ContextBuilder;
/** Reads and writes the turn makes through its store port. */
let calls: { findSession: number; appends: number; listTail: number };

/** The real store behind the turn's reads, with each call counted on the way through. */
function countedStore(): TurnDeps['store'] {
  return {
    findSession: (id) => {
      calls.findSession++;
      return store.findSession(id);
    },
    loadContext: (id, afterSeq) => store.loadContext(id, afterSeq),
    listTail: (id, afterSeq, limit) => {
      calls.listTail++;
      return store.listTail(id, afterSeq, limit);
    },
  };
}

/** The slot's write port over the real store, with each append counted. */
function countedWrites(sessionId: string, slot = new AbortController().signal): TurnWrites {
  const counted = new Proxy(store, {
    get(target, name, receiver) {
      if (name !== 'appendMessagesWithEvents')
        return Reflect.get(target, name, receiver) as unknown;
      return (...args: Parameters<SqliteStore['appendMessagesWithEvents']>) => {
        calls.appends++;
        return target.appendMessagesWithEvents(...args);
      };
    },
  });
  return new TurnWriter(counted, events).open(sessionId, slot).writes;
}

function newTurn(session: SessionRow, extra: Partial<TurnDeps> = {}, slot?: AbortSignal): Turn {
  return new Turn(session, agent, {
    store: countedStore(),
    writes: countedWrites(session.id, slot),
    events,
    context,
    ...extra,
  });
}

async function newSession(history: ChatMessage[] = []): Promise<SessionRow> {
  const session = await store.createSession({
    agentName: 'assistant',
    mode: 'chat',
    compactCount: 50,
    systemPrompt: 'System prompt.',
  });
  if (history.length > 0) await store.appendMessages(session.id, history);
  return (await store.findSession(session.id))!;
}

/** Compacts the session's first `size` non-system messages, up to `toSeq`, as a manual compaction would. */
async function compact(
  session: SessionRow,
  size: number,
  toSeq: number,
  summary: string,
): Promise<void> {
  const committed = await store.commitCompaction({
    sessionId: session.id,
    expectedSize: (await store.findSession(session.id))!.compact_size,
    toSize: size,
    toSeq,
    summary,
    trigger: 'manual',
    model: 'm',
    inputChars: 1,
  });
  expect(committed).toBeTruthy();
}

async function history(sessionId: string): Promise<StoredMessage[]> {
  return store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
}

/** The seq of the session's message with this content. */
async function seqOf(sessionId: string, content: string): Promise<number> {
  const message = (await history(sessionId)).find((m) => m.content === content);
  expect(message).toBeDefined();
  return message!.seq;
}

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-turn-'));
  store = new SqliteStore(path.join(dir, 'cairn.db'));
  events = new EventBus(store);
  context = new ContextBuilder({ store });
  calls = { findSession: 0, appends: 0, listTail: 0 };
});

afterEach(async () => {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('Turn.begin', () => {
  const interrupted: ChatMessage[] = [
    { role: 'user', content: 'look both up' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{}' } },
        { id: 'c2', type: 'function', function: { name: 'lookup', arguments: '{}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'c1', name: 'lookup', content: 'found one' },
  ];

  it('stores a result for an interrupted call before the input, and starts the turn at the input', async () => {
    const session = await newSession(interrupted);
    const turn = newTurn(session);

    const messages = await turn.begin([{ role: 'user', content: 'and now?' }]);

    expect(lines(messages)).toEqual([
      'system:System prompt.',
      'user:look both up',
      'assistant:',
      'tool:found one',
      `tool:${INTERRUPTED_TOOL_RESULT}`,
      'user:and now?',
    ]);
    expect(messages[4]).toMatchObject({ tool_call_id: 'c2' });
    expect(lines(turn.stored)).toEqual([`tool:${INTERRUPTED_TOOL_RESULT}`, 'user:and now?']);
    expect(lines((await history(session.id)).slice(-2))).toEqual(lines(turn.stored));
    // The repair belongs to the interrupted turn; this turn starts at its input.
    expect(turn.turnStartSeq).toBe(turn.stored[1]!.seq);
  });

  it('leaves a call the caller says is still pending without a result', async () => {
    const session = await newSession(interrupted);
    const turn = newTurn(session);

    const messages = await turn.begin([], new Set(['c2']));

    expect(lines(messages)).toEqual([
      'system:System prompt.',
      'user:look both up',
      'assistant:',
      'tool:found one',
    ]);
    expect(turn.stored).toEqual([]);
  });

  it('writes the input of a whole history in one append', async () => {
    const session = await newSession([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ]);
    const turn = newTurn(session);

    await turn.begin([{ role: 'user', content: 'again' }]);

    expect(calls.appends).toBe(1);
    expect(lines(turn.stored)).toEqual(['user:again']);
    expect(turn.turnStartSeq).toBe(turn.stored[0]!.seq);
  });

  it('stores an opening before the input and builds the first call with it', async () => {
    const session = await newSession();
    const turn = newTurn(session);

    const messages = await turn.begin([{ role: 'user', content: 'second' }], undefined, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'an answer' },
    ]);

    // The opening's system message joins the system messages; the rest is the tail.
    expect(lines(messages)).toEqual([
      'system:System prompt.',
      'system:Be brief.',
      'user:first',
      'assistant:an answer',
      'user:second',
    ]);
    expect(calls.appends).toBe(2);
    expect(lines(await history(session.id))).toEqual(lines(messages));
    // The turn starts at its input, after the opening.
    expect(turn.turnStartSeq).toBe(turn.stored[3]!.seq);
    const before = await turn.historyBeforeTurn();
    expect(lines(before.messages)).toEqual(['user:first', 'assistant:an answer']);
  });

  it('has no start seq while it stored no input, so all history counts as before the turn', async () => {
    const session = await newSession([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ]);
    const turn = newTurn(session);
    expect(turn.turnStartSeq).toBe(Number.MAX_SAFE_INTEGER);

    await turn.begin([]);

    expect(turn.turnStartSeq).toBe(Number.MAX_SAFE_INTEGER);
    const before = await turn.historyBeforeTurn();
    expect(lines(before.messages)).toEqual(['user:hi', 'assistant:hello']);
  });
});

describe('Turn.persist', () => {
  it('stores the messages with their usage and prompt tokens, and publishes their events', async () => {
    const session = await newSession();
    const seen: EventRow[] = [];
    events.subscribe((e) => seen.push(e));
    const turn = newTurn(session);

    await turn.persist(
      [{ role: 'user', content: 'q' }],
      { input_tokens: 7, output_tokens: 3, cache_read_tokens: 2 },
      42,
    );

    const row = (await store.findSession(session.id))!;
    expect(row).toMatchObject({
      input_tokens: 7,
      output_tokens: 3,
      cache_read_tokens: 2,
      last_prompt_tokens: 42,
    });
    expect(lines(turn.stored)).toEqual(['user:q']);
    expect(seen.map((e) => [e.type, e.data['seq']])).toEqual([
      ['message.created', turn.stored[0]!.seq],
    ]);

    // Without usage nothing is added, and the last prompt stays the one reported.
    await turn.persist([{ role: 'assistant', content: 'a' }]);
    expect(await store.findSession(session.id)).toMatchObject({
      input_tokens: 7,
      output_tokens: 3,
      last_prompt_tokens: 42,
      message_count: row.message_count + 1,
    });
    expect(lines(turn.stored)).toEqual(['user:q', 'assistant:a']);
  });

  it('stores nothing once the slot is lost', async () => {
    const session = await newSession();
    const slot = new AbortController();
    const turn = newTurn(session, {}, slot.signal);
    await turn.persist([{ role: 'user', content: 'before' }]);

    slot.abort(new Error('slot lost'));

    await expect(turn.persist([{ role: 'assistant', content: 'after' }])).rejects.toThrow(
      'slot lost',
    );
    expect(lines(await history(session.id))).toEqual(['system:System prompt.', 'user:before']);
    expect(lines(turn.stored)).toEqual(['user:before']);
  });

  it('runs no other write once the slot is lost', async () => {
    const session = await newSession();
    const slot = new AbortController();
    const turn = newTurn(session, {}, slot.signal);
    await turn.writes.putMemory('assistant', 'before', 'kept');

    slot.abort(new Error('slot lost'));

    await expect(turn.writes.putMemory('assistant', 'after', 'lost')).rejects.toThrow('slot lost');
    expect((await store.listMemory('assistant')).map((note) => note.key)).toEqual(['before']);
  });

  it('stores nothing for a task that is not this instance’s running task', async () => {
    const session = await newSession();
    const turn = newTurn(session, { runningTask: 'task_gone' });

    await expect(turn.persist([{ role: 'user', content: 'late' }])).rejects.toMatchObject({
      code: 'SESSION_LOCK_LOST',
    });
    expect(lines(await history(session.id))).toEqual(['system:System prompt.']);
  });
});

describe('Turn.messagesAfter', () => {
  it('answers from the loaded messages while they fit the limit, from the store past it', async () => {
    const session = await newSession([{ role: 'user', content: 'one' }]);
    const turn = newTurn(session);
    await turn.begin([{ role: 'user', content: 'two' }]);
    // Appended after the load: the builder keeps them with the loaded tail.
    await turn.persist([{ role: 'assistant', content: 'three' }]);

    const all = await turn.messagesAfter(0, 3);
    expect(lines(all)).toEqual(['user:one', 'user:two', 'assistant:three']);
    expect(calls.listTail).toBe(0);

    const first = await turn.messagesAfter(0, 2);
    expect(lines(first)).toEqual(['user:one', 'user:two']);
    expect(calls.listTail).toBe(1);
  });

  it('reads the store when nothing is loaded yet', async () => {
    const session = await newSession([
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
    ]);
    const turn = newTurn(session);

    const after = await turn.messagesAfter(0, 10);

    expect(lines(after)).toEqual(['user:one', 'assistant:two']);
    expect(calls.listTail).toBe(1);
  });
});

/** A guard that hands on what it is given, after noting the turn's view of the session. */
class NotingGuard implements ContextGuard {
  readonly seen: { compactSeq: number; messages: string[] }[] = [];
  constructor(private readonly replaceWith?: ChatMessage[]) {}
  beforeModelCall(turn: GuardedTurn, messages: ChatMessage[]): Promise<ChatMessage[]> {
    this.seen.push({ compactSeq: turn.session.compact_seq, messages: lines(messages) });
    return Promise.resolve(this.replaceWith ?? messages);
  }
  guardModel(): never {
    throw new Error('not used by the turn');
  }
}

describe('Turn.prepare', () => {
  it('without a guard or recall hands the messages on as they are and never re-reads', async () => {
    const session = await newSession([{ role: 'user', content: 'one' }]);
    const turn = newTurn(session);
    const messages = await turn.begin([{ role: 'user', content: 'two' }]);
    expect(await turn.prepare(messages)).toBe(messages);
    await compact(session, 1, await seqOf(session.id, 'one'), 'S');

    const loop: ChatMessage[] = [...messages, { role: 'assistant', content: 'three' }];
    expect(await turn.prepare(loop)).toBe(loop);
    expect(calls.findSession).toBe(0);
  });

  it('re-reads the session from the second call on, and rebuilds once after a compaction lands', async () => {
    const session = await newSession([
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
    ]);
    const guard = new NotingGuard();
    const turn = newTurn(session, { guard });
    const messages = await turn.begin([{ role: 'user', content: 'three' }]);

    // The first call: the session as read under the slot, the loop's messages unchanged.
    expect(await turn.prepare(messages)).toBe(messages);
    expect(calls.findSession).toBe(0);

    // The loop's own list (not what the store holds) is used while the pointer has not moved.
    const loop: ChatMessage[] = [{ role: 'user', content: 'the loop’s list' }];
    expect(await turn.prepare(loop)).toBe(loop);
    expect(calls.findSession).toBe(1);

    const pointer = await seqOf(session.id, 'two');
    await compact(session, 2, pointer, 'S');
    const rebuilt = await turn.prepare(loop);
    expect(lines(rebuilt)).toEqual([
      'system:System prompt.',
      `user:${SUMMARY_PREFIX}S`,
      `assistant:${SUMMARY_ACK}`,
      'user:three',
    ]);
    expect(turn.session.compact_seq).toBe(pointer);
    expect(calls.findSession).toBe(2);

    // Built at the new pointer: the next call uses the loop's list again.
    const next: ChatMessage[] = [...rebuilt, { role: 'assistant', content: 'four' }];
    expect(await turn.prepare(next)).toBe(next);
    expect(guard.seen.map((s) => s.compactSeq)).toEqual([0, 0, pointer, pointer]);
    expect(guard.seen[2]!.messages).toEqual(lines(rebuilt));
  });

  it('returns what the guard returns', async () => {
    const session = await newSession();
    const replaced: ChatMessage[] = [{ role: 'user', content: 'compacted context' }];
    const turn = newTurn(session, { guard: new NotingGuard(replaced) });
    const messages = await turn.begin([{ role: 'user', content: 'hi' }]);

    expect(await turn.prepare(messages)).toBe(replaced);
  });
});

/** A recall that puts a scripted block (or nothing) before the last message of each call. */
class ScriptedRecall implements ContextRecall {
  readonly seen: string[][] = [];
  constructor(private readonly script: (RecallDone | null)[]) {}
  recall(_turn: GuardedTurn, messages: ChatMessage[]): ReturnType<ContextRecall['recall']> {
    this.seen.push(lines(messages));
    const next = this.script.shift();
    if (!next) return Promise.resolve({ messages, done: null });
    const block: ChatMessage = { role: 'user', content: `recalled ${next.seqs.join(',')}` };
    const out = [...messages.slice(0, -1), block, ...messages.slice(-1)];
    return Promise.resolve({ messages: out, done: { ...next, block } });
  }
}

describe('Turn.prepare with recall', () => {
  it('swaps the last call’s block for the new one and sums what was recalled', async () => {
    const session = await newSession();
    const recall = new ScriptedRecall([
      { seqs: [5, 2], tokens: 10 },
      { seqs: [3, 5], tokens: 4 },
      null,
    ]);
    const told: RecallDone[] = [];
    const turn = newTurn(session, { recall, onRecall: (done) => told.push(done) });
    expect(turn.recall).toBeNull();
    expect(turn.recalledSeqs()).toBeUndefined();
    const messages = await turn.begin([{ role: 'user', content: 'hi' }]);

    const first = await turn.prepare(messages);
    expect(lines(first)).toEqual(['system:System prompt.', 'user:recalled 5,2', 'user:hi']);
    expect(turn.recalledSeqs()).toEqual([5, 2]);

    // The loop hands back the messages with the old block in them: recall never sees it.
    const second = await turn.prepare(first);
    expect(recall.seen[1]).toEqual(['system:System prompt.', 'user:hi']);
    expect(lines(second)).toEqual(['system:System prompt.', 'user:recalled 3,5', 'user:hi']);
    expect(turn.recalledSeqs()).toEqual([3, 5]);

    const third = await turn.prepare(second);
    expect(lines(third)).toEqual(['system:System prompt.', 'user:hi']);
    expect(turn.recalledSeqs()).toBeUndefined();

    expect(turn.recall).toEqual({ calls: 2, seqs: [2, 3, 5], tokens: 14 });
    expect(told).toEqual([
      { seqs: [5, 2], tokens: 10 },
      { seqs: [3, 5], tokens: 4 },
    ]);
  });

  it('works without anyone to tell, and recalls after the guard', async () => {
    const session = await newSession();
    const recall = new ScriptedRecall([{ seqs: [10, 2], tokens: 1 }]);
    const guarded: ChatMessage[] = [{ role: 'user', content: 'guarded' }];
    const turn = newTurn(session, { recall, guard: new NotingGuard(guarded) });
    const messages = await turn.begin([{ role: 'user', content: 'hi' }]);

    const out = await turn.prepare(messages);

    expect(recall.seen).toEqual([['user:guarded']]);
    expect(lines(out)).toEqual(['user:recalled 10,2', 'user:guarded']);
    // In number order, not as text.
    expect(turn.recall).toEqual({ calls: 1, seqs: [2, 10], tokens: 1 });
  });
});

describe('the guard’s view of the turn', () => {
  it('rebuild re-reads the session and builds at its pointer', async () => {
    const session = await newSession([
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
    ]);
    const turn = newTurn(session);
    await turn.begin([{ role: 'user', content: 'three' }]);
    await compact(session, 2, await seqOf(session.id, 'two'), 'S');

    const rebuilt = await turn.rebuild();

    expect(lines(rebuilt)).toEqual([
      'system:System prompt.',
      `user:${SUMMARY_PREFIX}S`,
      `assistant:${SUMMARY_ACK}`,
      'user:three',
    ]);
    expect(turn.session.compact_summary).toBe('S');
  });

  it('historyBeforeTurn is the current summary and the raw messages before the turn’s input', async () => {
    const session = await newSession([
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
      { role: 'user', content: 'three' },
      { role: 'assistant', content: 'four' },
    ]);
    const turn = newTurn(session);
    await turn.begin([{ role: 'user', content: 'five' }]);
    await turn.persist([{ role: 'assistant', content: 'six' }]);
    await compact(session, 1, await seqOf(session.id, 'one'), 'S');

    const before = await turn.historyBeforeTurn();

    expect(before.summary).toBe('S');
    expect(lines(before.messages)).toEqual(['assistant:two', 'user:three', 'assistant:four']);
  });

  it('rebuildWithSummary stands the summary in for everything before the turn', async () => {
    const session = await newSession([
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
    ]);
    const turn = newTurn(session);
    await turn.begin([{ role: 'user', content: 'three' }]);
    await turn.persist([{ role: 'assistant', content: 'four' }]);

    const messages = await turn.rebuildWithSummary('in memory');

    expect(lines(messages)).toEqual([
      'system:System prompt.',
      `user:${SUMMARY_PREFIX}in memory`,
      `assistant:${SUMMARY_ACK}`,
      'user:three',
      'assistant:four',
    ]);
    // In memory only: the session keeps no summary.
    expect((await store.findSession(session.id))!.compact_summary).toBeNull();
  });

  it('shows the session, the agent, the trace span and the running task it was given', async () => {
    const session = await newSession();
    const span = { name: 'invoke_agent assistant' };
    const turn = newTurn(session, { span, runningTask: 'task_1' });

    expect(turn.session).toBe(session);
    expect(turn.agent).toBe(agent);
    expect(turn.traceSpan).toBe(span);
    expect(turn.runningTask).toBe('task_1');
    expect(newTurn(session).runningTask).toBeUndefined();
  });
});

describe('Turn.recordCompaction', () => {
  it('sums the turn’s compactions, keeping the newest size', async () => {
    const turn = newTurn(await newSession());
    expect(turn.compaction).toBeNull();

    turn.recordCompaction({ compactedCount: 4, newSize: 4, input_tokens: 100, output_tokens: 20 });
    turn.recordCompaction({ compactedCount: 3, newSize: 7, input_tokens: 50, output_tokens: 5 });

    expect(turn.compaction).toEqual({
      trigger: 'auto',
      runs: 2,
      compactedCount: 7,
      newSize: 7,
      input_tokens: 150,
      output_tokens: 25,
    });
  });
});
