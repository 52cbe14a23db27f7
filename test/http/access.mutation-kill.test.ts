/**
 * Access over a real SQLite store: a client key reaches its own sessions and
 * tasks and its key's agents; another key's objects, and objects that do not
 * exist, answer the same not-found error with the same advice, so a key
 * cannot tell "someone else's" from "none"; the admin reaches everything.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import { Access, agentNotFound, taskNotFound } from '../../src/http/access.js';
import type { Principal } from '../../src/http/principal.js';
import type { KeyRow } from '../../src/store/store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

function key(id: string, agents: KeyRow['agents']): KeyRow {
  return {
    id,
    name: id,
    agents,
    limits: {},
    created_at: '2026-01-01T00:00:00.000Z',
    last_used_at: null,
    revoked_at: null,
  };
}

/** The error `run` throws (fails when it throws nothing or something else). */
async function refusal(run: () => unknown): Promise<CairnError> {
  try {
    await run();
  } catch (error) {
    expect(error).toBeInstanceOf(CairnError);
    return error as CairnError;
  }
  throw new Error('expected a refusal');
}

describe('Access', () => {
  let dir: string;
  let store: SqliteStore;
  let access: Access;
  let mine: Principal;
  let theirs: Principal;
  const admin: Principal = { kind: 'admin', user: null };

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-access-'));
    store = new SqliteStore(path.join(dir, 'cairn.db'));
    const a = await store.createKey({
      name: 'a',
      agents: '*',
      limits: {},
      secretHash: 'a'.repeat(64),
    });
    const b = await store.createKey({
      name: 'b',
      agents: ['other'],
      limits: {},
      secretHash: 'b'.repeat(64),
    });
    mine = { kind: 'client', key: a, user: null };
    theirs = { kind: 'client', key: b, user: null };
    access = new Access(store);
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  async function sessionOf(owner: KeyRow | null) {
    return store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
      owner: { key: owner?.id ?? null, user: null },
    });
  }

  it("gives a key its own session, and answers another key's as not found", async () => {
    const session = await sessionOf((mine as { key: KeyRow }).key);
    expect((await access.session(mine, session.id)).id).toBe(session.id);
    expect((await access.session(admin, session.id)).id).toBe(session.id);
    const hidden = await refusal(() => access.session(theirs, session.id));
    const missing = await refusal(() => access.session(theirs, 'sess_missing'));
    expect(hidden.code).toBe('SESSION_NOT_FOUND');
    expect(missing.code).toBe('SESSION_NOT_FOUND');
    expect(hidden.message).toBe(
      `Session "${session.id}" not found. List sessions with GET /sessions.`,
    );
  });

  it('gives the admin a session no key owns, and no key reaches it', async () => {
    const session = await sessionOf(null);
    expect((await access.session(admin, session.id)).id).toBe(session.id);
    expect((await refusal(() => access.session(mine, session.id))).code).toBe('SESSION_NOT_FOUND');
  });

  it("gives a key its own task, and answers another key's, or none, as TASK_NOT_FOUND", async () => {
    const session = await sessionOf((mine as { key: KeyRow }).key);
    const task = await store.createTask({
      sessionId: session.id,
      agentName: 'assistant',
      input: 'do it',
    });
    expect((await access.task(mine, task.id)).id).toBe(task.id);
    expect((await access.task(admin, task.id)).id).toBe(task.id);
    const hidden = await refusal(() => access.task(theirs, task.id));
    expect(hidden.code).toBe('TASK_NOT_FOUND');
    expect(hidden.message).toBe(`Task "${task.id}" not found. List tasks with GET /tasks.`);
    // A task that does not exist, even for the admin, is the same error, not a crash.
    const missing = await refusal(() => access.task(admin, 'task_missing'));
    expect(missing.code).toBe('TASK_NOT_FOUND');
    expect(missing.message).toBe(taskNotFound('task_missing').message);
  });

  it("lets a key use only its agents, with advice naming the agent's file", async () => {
    expect(() => access.agent(mine, 'assistant')).not.toThrow();
    expect(() => access.agent(theirs, 'other')).not.toThrow();
    expect(() => access.agent(admin, 'anything')).not.toThrow();
    const refused = await refusal(() => access.agent(theirs, 'assistant'));
    expect(refused.code).toBe('AGENT_NOT_FOUND');
    expect(refused.status).toBe(404);
    expect(refused.message).toBe(
      'Agent "assistant" not found. Add agents/assistant/agent.json or check GET /agents.',
    );
    expect(agentNotFound('x').message).toBe(
      'Agent "x" not found. Add agents/x/agent.json or check GET /agents.',
    );
  });

  it('refuses a key with an agent list that only resembles the name', () => {
    const narrow: Principal = { kind: 'client', key: key('key_n', ['assist']), user: null };
    expect(() => access.agent(narrow, 'assistant')).toThrow(CairnError);
    const none: Principal = { kind: 'client', key: key('key_e', []), user: null };
    expect(() => access.agent(none, 'assistant')).toThrow(CairnError);
  });
});
