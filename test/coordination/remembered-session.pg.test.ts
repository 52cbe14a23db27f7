/**
 * Turns back to back on one session, on Postgres: while the instance holds
 * the session's lock without a break, the next turn starts from the row the
 * last turn's append returned instead of reading it, and its first write is
 * conditioned on the row's version. Whatever a writer without the lock did
 * meanwhile — a title, a manual compaction, a sweep that closed the session,
 * a delete — is found at that write: nothing is stored, the session is read
 * and checked again, and the turn begins over from what is really there.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import { SessionMovedError } from '../../src/store/session-moved.js';
import type { PgStore } from '../../src/store/postgres/pg-store.js';
import { StatementCounter } from '../helpers/statement-counter.js';
import { PATIENT_MS, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';

const APPROVED_TOOL = `export default {
  name: 'launch',
  description: 'Launches',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() { return 'launched'; },
};
`;

const AGENT = { ...TEST_AGENT, tools: [{ tool: './tools/launch.js', approval: 'required' }] };

/** The statements of a turn that starts from the remembered row: its two appends, nothing read. */
const REMEMBERED_TURN_STATEMENTS = 2;

let t: TestApp;
let counter: StatementCounter;

beforeAll(async () => {
  t = await startTestApp({
    database: 'postgres',
    agents: { assistant: AGENT },
    files: { 'agents/assistant/tools/launch.js': APPROVED_TOOL },
    mainModel: { contextWindow: 8_192, timeoutMs: PATIENT_MS },
  });
  counter = StatementCounter.install();
});
afterAll(async () => {
  counter?.uninstall();
  await t?.close();
});
beforeEach(() => {
  t.fake!.reset();
  t.fake!.setDefault((body) =>
    isSummaryRequest(body) ? { content: 'SUMMARY-OF-THE-START' } : { content: 'ok' },
  );
});

const pool = () => (t.app.store as PgStore).pool;

async function newSession(): Promise<string> {
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/sessions',
    payload: { agentName: 'assistant' },
  });
  expect(res.statusCode, res.body).toBe(201);
  return res.json<{ session: { id: string } }>().session.id;
}

/** One chat turn through the API. */
function post(sessionId: string, message: string) {
  return t.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, sessionId },
  });
}

/** One chat turn (the runtime's, as the route runs it), with the statements it sent to Postgres. */
async function counted(sessionId: string, message: string) {
  const { result, statements } = await counter.count(() =>
    t.app.chats.run({ agentName: 'assistant', message, sessionId }),
  );
  expect(result.reply).toBe('ok');
  return statements.postgres;
}

async function chat(sessionId: string, message: string): Promise<void> {
  const res = await post(sessionId, message);
  expect(res.statusCode, res.body).toBe(200);
}

async function contents(sessionId: string): Promise<(string | null)[]> {
  const messages = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 200 });
  return messages.filter((m) => m.role !== 'system').map((m) => m.content);
}

/** The agent's (not the summariser's) requests to the fake, newest last. */
const agentRequests = () => t.fake!.requests.filter((r) => !isSummaryRequest(r.body));

describe('a turn that starts from the remembered session row', () => {
  it('reads nothing: its two appends are all it sends, and the row stays what a read gives', async () => {
    const id = await newSession();
    await chat(id, 'first');
    for (const message of ['second', 'third'])
      expect(await counted(id, message)).toBe(REMEMBERED_TURN_STATEMENTS);
    expect(await contents(id)).toEqual(['first', 'ok', 'second', 'ok', 'third', 'ok']);
    const session = (await t.app.store.findSession(id))!;
    expect(session.message_count).toBe(1 + 6);
    // Each model call saw the whole conversation so far, as a fresh read would have built it.
    const last = agentRequests().at(-1)!.body.messages as { content: string }[];
    expect(last.map((m) => m.content).slice(1)).toEqual(['first', 'ok', 'second', 'ok', 'third']);
  });

  it('finds a title set without the lock at its first write: stores nothing twice, keeps the title, and remembers again after', async () => {
    const id = await newSession();
    await chat(id, 'first');
    const patched = await t.app.server.inject({
      method: 'PATCH',
      url: `/sessions/${id}`,
      payload: { title: 'Set by hand' },
    });
    expect(patched.statusCode, patched.body).toBe(200);

    // The conditioned append was refused, so the session was read again.
    expect(await counted(id, 'second')).toBeGreaterThan(REMEMBERED_TURN_STATEMENTS);
    expect(await contents(id)).toEqual(['first', 'ok', 'second', 'ok']);
    expect((await t.app.store.findSession(id))!.title).toBe('Set by hand');

    expect(await counted(id, 'third')).toBe(REMEMBERED_TURN_STATEMENTS);
  });

  it('builds its model call from a manual compaction made without the lock, not from the remembered pointer', async () => {
    const id = await newSession();
    for (let i = 0; i < 6; i++) await chat(id, `message ${i} ${'x'.repeat(400)}`);
    const compacted = await t.app.server.inject({
      method: 'POST',
      url: `/sessions/${id}/compact`,
    });
    expect(compacted.statusCode, compacted.body).toBe(200);
    const { compact_seq: compactSeq } = (await t.app.store.findSession(id))!;
    expect(compactSeq).toBeGreaterThan(0);

    await chat(id, 'after the compaction');
    const sent = agentRequests().at(-1)!.body.messages as { role: string; content: string }[];
    // System prompt, then the summary pair, then only what the summary does not cover.
    expect(sent[1]!.content).toBe(`${SUMMARY_PREFIX}SUMMARY-OF-THE-START`);
    expect(sent.some((m) => m.content.startsWith('message 0 '))).toBe(false);
    expect(sent.at(-1)!.content).toBe('after the compaction');
  });

  it('after a reset between turns, starts from the reset session', async () => {
    const id = await newSession();
    await chat(id, 'before the reset');
    const reset = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/reset` });
    expect(reset.statusCode, reset.body).toBe(200);

    await chat(id, 'after the reset');
    expect(await contents(id)).toEqual(['after the reset', 'ok']);
    const sent = agentRequests().at(-1)!.body.messages as { content: string }[];
    expect(sent.map((m) => m.content).slice(1)).toEqual(['after the reset']);
  });

  it('is refused with SESSION_CLOSED when a sweep closed the session without the lock, storing nothing', async () => {
    const id = await newSession();
    await chat(id, 'first');
    await pool().query(`UPDATE sessions SET status = 'closed' WHERE id = $1`, [id]);

    const res = await post(id, 'into a closed session');
    expect(res.statusCode, res.body).toBe(400);
    expect(res.json()).toMatchObject({ error: { code: 'SESSION_CLOSED' } });
    expect(await contents(id)).toEqual(['first', 'ok']);
  });

  it('is refused with SESSION_NOT_FOUND when the session was deleted without the lock', async () => {
    const id = await newSession();
    await chat(id, 'first');
    await pool().query('DELETE FROM sessions WHERE id = $1', [id]);

    const res = await post(id, 'into a deleted session');
    expect(res.statusCode, res.body).toBe(404);
    expect(res.json()).toMatchObject({ error: { code: 'SESSION_NOT_FOUND' } });
  });

  it('is not used after a turn that left a call waiting for approval: the next chat is refused with TASK_WAITING', async () => {
    const id = await newSession();
    await chat(id, 'first');
    t.fake!.script({ tool_calls: [{ name: 'launch', arguments: '{}' }] });
    const held = await post(id, 'launch it');
    expect(held.statusCode, held.body).toBe(200);
    expect(held.json()).toMatchObject({ pendingApproval: { tool: 'launch' } });

    const res = await post(id, 'and another thing');
    expect(res.statusCode, res.body).toBe(409);
    expect(res.json()).toMatchObject({ error: { code: 'TASK_WAITING' } });
    expect((await contents(id)).at(-1)).not.toBe('and another thing');
  });
});

describe('an append conditioned on the row version (PgStore)', () => {
  it('writes while the row is at the version the last append returned, and otherwise writes nothing', async () => {
    const { store } = t.app;
    const id = await newSession();
    const first = await store.appendMessagesWithEvents(
      id,
      [{ role: 'user', content: 'one' }],
      'message.created',
    );
    expect(first.session?.row).toMatchObject({ id, last_seq: first.messages[0]!.seq });
    const second = await store.appendMessagesWithEvents(
      id,
      [{ role: 'assistant', content: 'two' }],
      'message.created',
      { ifVersion: first.session!.version },
    );
    expect(second.messages).toHaveLength(1);
    expect(second.session!.version).not.toBe(first.session!.version);
    expect(second.session!.row.message_count).toBe(first.session!.row.message_count + 1);

    // A write without the lock moves the row on.
    await store.updateSession(id, { title: 'renamed' });
    await expect(
      store.appendMessagesWithEvents(id, [{ role: 'user', content: 'three' }], 'message.created', {
        ifVersion: second.session!.version,
      }),
    ).rejects.toBeInstanceOf(SessionMovedError);
    expect(await contents(id)).toEqual(['one', 'two']);
  });

  it('checks the version on the locked path too (a task run appends there)', async () => {
    const { store } = t.app;
    const id = await newSession();
    const task = await store.createTask({ sessionId: id, agentName: 'assistant', input: 'go' });
    await pool().query(`UPDATE tasks SET status = 'running' WHERE id = $1`, [task.id]);
    const first = await store.appendMessagesWithEvents(
      id,
      [{ role: 'user', content: 'one' }],
      'message.created',
      { runningTask: task.id },
    );
    await store.updateSession(id, { title: 'renamed' });
    await expect(
      store.appendMessagesWithEvents(id, [{ role: 'user', content: 'two' }], 'message.created', {
        runningTask: task.id,
        ifVersion: first.session!.version,
      }),
    ).rejects.toBeInstanceOf(SessionMovedError);
    expect(await contents(id)).toEqual(['one']);
  });
});
