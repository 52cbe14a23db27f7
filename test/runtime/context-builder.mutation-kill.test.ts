/**
 * ContextBuilder.loadedAfter answers from memory only for a seq at or after the
 * compaction pointer: the loaded tail starts there, so the messages between an
 * older seq and the pointer are not in memory and must come from the store.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import { ContextBuilder } from '../../src/runtime/context-builder.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

// Without a systemContext the builder never reads the agent.
const agent = { name: 'assistant' } as AgentConfig;

describe('ContextBuilder.loadedAfter and the compaction pointer', () => {
  let dir: string;
  let store: SqliteStore;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-context-'));
    store = new SqliteStore(path.join(dir, 'cairn.db'));
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('answers for a seq at the pointer from memory, and not for a seq before it', async () => {
    const session = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      title: null,
      parentSessionId: null,
      compactCount: 50,
      systemPrompt: 'System prompt.',
    });
    const stored = await store.appendMessages(session.id, [
      { role: 'user', content: 'one' },
      { role: 'assistant', content: 'two' },
      { role: 'user', content: 'three' },
      { role: 'assistant', content: 'four' },
    ]);
    const pointer = stored[1]!.seq;
    const committed = await store.commitCompaction({
      sessionId: session.id,
      expectedSize: 0,
      toSize: 2,
      toSeq: pointer,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 6,
    });
    expect(committed).toBeTruthy();
    const now = (await store.findSession(session.id))!;
    const builder = new ContextBuilder({ store });
    const built = await builder.build(now, agent);
    expect(built.tail.map((m) => m.content)).toEqual(['three', 'four']);
    const state = { epoch: now.epoch, compactSeq: now.compact_seq };

    expect(builder.loadedAfter(session.id, state, pointer)?.map((m) => m.content)).toEqual([
      'three',
      'four',
    ]);
    // Before the pointer: 'two' is after that seq but not in memory.
    expect(builder.loadedAfter(session.id, state, stored[0]!.seq)).toBeUndefined();
    expect(builder.loadedAfter(session.id, state, 0)).toBeUndefined();
  });
});
