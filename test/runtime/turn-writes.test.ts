/**
 * The turn's one write door as a type: what runs under a session's lock (the
 * turn engine, a turn, the context guard, a chat hold, automatic compaction,
 * a tool's memory) gets the store's reads and the slot's `TurnWrites`, never
 * the store — a raw write from there does not compile (the `@ts-expect-error`
 * lines below fail `tsc --noEmit` the day one does). And at run time: the
 * port a slot handed out refuses every write once that slot has ended, and
 * nothing it was asked is written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AutoCompactionDeps } from '../../src/compaction/auto-compaction.js';
import type { LandingTurn } from '../../src/compaction/background-compaction.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import type { ChatHoldDeps } from '../../src/runtime/chat-hold.js';
import type { GuardedTurn } from '../../src/runtime/context-guard.js';
import type { TurnEngineDeps } from '../../src/runtime/turn-engine.js';
import type { TurnWrites } from '../../src/runtime/turn-writes.js';
import type { TurnDeps } from '../../src/runtime/turn.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const messages: ChatMessage[] = [{ role: 'assistant', content: 'late' }];
const compaction = {
  expectedSize: 0,
  toSize: 1,
  toSeq: 1,
  summary: 'summary',
  trigger: 'auto' as const,
  model: 'm',
  inputChars: 1,
};

/** Never run: each line is a raw write tried through what a turn receives, checked by tsc. */
function _rawWritesDoNotCompile(
  engine: TurnEngineDeps,
  turn: TurnDeps,
  guarded: GuardedTurn,
  landing: LandingTurn,
  hold: ChatHoldDeps,
  auto: AutoCompactionDeps,
  writes: TurnWrites,
): void {
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.appendMessagesWithEvents('s', messages, 'message.created');
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.appendMessages('s', messages);
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.transitionTask('t', ['running'], { status: 'completed' });
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.commitCompaction({ sessionId: 's', ...compaction });
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.putMemory('agent', 'key', 'content');
  // @ts-expect-error the engine holds the store's reads only
  void engine.store.deleteSession('s');
  // @ts-expect-error the engine only publishes events a turn's append committed
  void engine.events.emit('message.created', 's', {});
  // @ts-expect-error the engine's writer opens ports, and holds no store it hands out
  void engine.writer.store;
  // @ts-expect-error a turn reads the store and writes through its port
  void turn.store.appendMessagesWithEvents('s', messages, 'message.created');
  // @ts-expect-error no door that runs any closure: only the port's own writes
  void guarded.write(async () => 1);
  // @ts-expect-error a prepared summary lands through the port, not the store
  void landing.store;
  // @ts-expect-error a chat hold holds no store
  void hold.store.createTask({ sessionId: 's', agentName: 'a', input: 'i' });
  // @ts-expect-error automatic compaction holds no store
  void auto.store.setCompactionSuspended('s', true);
  // @ts-expect-error automatic compaction lands only through the turn's port
  void auto.compaction.run({ sessionId: 's', trigger: 'auto' });
  // @ts-expect-error the port is bound to its session: no write to another one
  void writes.appendMessagesWithEvents('other', messages, 'message.created');
  // @ts-expect-error the port is bound to its session: no write to another one
  void writes.createTask({ sessionId: 'other', agentName: 'a', input: 'i' });
  // @ts-expect-error the port lands a compaction by its compare-and-set, for its session
  void writes.commitCompaction({ sessionId: 'other', ...compaction });
  // @ts-expect-error a reset, a close or a delete takes the session exclusively, not a turn
  void writes.deleteSession('s');
}

describe('the slot’s write port', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({ fake: null });
  });
  afterAll(async () => {
    await t.close();
  });

  it('writes while its slot is held, and refuses every write once the slot has ended', async () => {
    const { app } = t;
    const session = await app.sessions.create({ agentName: 'assistant', mode: 'chat' });
    const agent = app.agents.get('assistant');
    const eventsBefore = await app.store.listEvents({
      afterId: 0,
      sessionId: session.id,
      limit: 100,
    });

    const kept = await app.engine.withTurnSlot(
      session.id,
      agent,
      async (_session, _run, writes) => {
        await writes.appendMessages([{ role: 'user', content: 'in the slot' }]);
        return writes;
      },
    );

    const refused = [
      kept.appendMessages(messages),
      kept.createTask({ agentName: 'assistant', input: 'late' }),
      kept.landCompaction({ ...compaction, expectedSize: session.compact_size }),
      kept.suspendCompaction(),
      kept.putMemory('assistant', 'late', 'after the slot'),
      kept.deleteMemory('assistant', 'late'),
      kept.emit('message.created', session.id, {}),
      kept.dropSessionIfUntouched(session.last_seq + 1),
    ];
    for (const write of refused)
      await expect(write).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });

    const stored = await app.store.listMessages(session.id, { afterSeq: 0, limit: 100 });
    expect(stored.filter((m) => m.role !== 'system').map((m) => m.content)).toEqual([
      'in the slot',
    ]);
    expect((await app.store.listTasks({ sessionId: session.id, limit: 10 })).items).toEqual([]);
    expect(await app.store.listMemory('assistant')).toEqual([]);
    const after = await app.store.findSession(session.id);
    expect(after).toBeDefined();
    expect(after?.compact_size).toBe(session.compact_size);
    expect(after?.compaction_suspended).toBe(session.compaction_suspended);
    const eventsAfter = await app.store.listEvents({
      afterId: 0,
      sessionId: session.id,
      limit: 100,
    });
    // One message.created: the append made in the slot.
    expect(eventsAfter.length).toBe(eventsBefore.length + 1);
  });

  it('writes no event of another session', async () => {
    const { app } = t;
    const one = await app.sessions.create({ agentName: 'assistant', mode: 'chat' });
    const other = await app.sessions.create({ agentName: 'assistant', mode: 'chat' });
    const agent = app.agents.get('assistant');
    const feed = () => app.store.listEvents({ afterId: 0, sessionId: other.id, limit: 10 });
    const before = await feed();

    await app.engine.withTurnSlot(one.id, agent, async (_session, _run, writes) => {
      await expect(writes.emit('tool.approved', other.id, {})).rejects.toMatchObject({
        code: 'INTERNAL',
      });
    });

    expect(await feed()).toEqual(before);
  });

  it('drops the session a failed turn was made for only while nothing is stored on it', async () => {
    const { app } = t;
    const agent = app.agents.get('assistant');
    const untouched = await app.sessions.create({ agentName: 'assistant', mode: 'chat' });
    const touched = await app.sessions.create({ agentName: 'assistant', mode: 'chat' });

    await app.engine.withTurnSlot(untouched.id, agent, (session, _run, writes) =>
      writes.dropSessionIfUntouched(session.last_seq),
    );
    await app.engine.withTurnSlot(touched.id, agent, async (session, _run, writes) => {
      await writes.appendMessages([{ role: 'user', content: 'stored' }]);
      await writes.dropSessionIfUntouched(session.last_seq);
    });

    expect(await app.store.findSession(untouched.id)).toBeUndefined();
    expect(await app.store.findSession(touched.id)).toBeDefined();
  });
});
