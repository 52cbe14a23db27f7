/**
 * Audit events carry the principal (`by: {key, user}`): approvals and
 * denials (also stored on the task as `decided_by`), imports, deletes and
 * resets. And a client key's event stream carries its own sessions' events
 * only, live, never another key's or the admin's.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PATIENT_MS, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'audit-admin';

const TOOL = `export default {
  name: 'book_trip',
  description: 'Books a trip.',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() { return 'booked'; },
};
`;

let t: TestApp;
let key: { id: string; secret: string };
let other: { id: string; secret: string };

function as(secret: string, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) {
  return t.app.server.inject({
    method,
    url,
    headers: { authorization: `Bearer ${secret}`, 'x-cairn-user': 'agent-smith' },
    ...(payload !== undefined ? { payload: payload as Record<string, unknown> } : {}),
  });
}

async function issue(name: string) {
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name },
  });
  const body = res.json<{ key: { id: string }; secret: string }>();
  return { id: body.key.id, secret: body.secret };
}

async function eventsOf(type: string) {
  return (await t.app.store.listEvents({ afterId: 0, limit: 10_000 })).filter(
    (e) => e.type === type,
  );
}

beforeAll(async () => {
  t = await startTestApp({
    agents: {
      assistant: {
        ...TEST_AGENT,
        tools: ['current_time', { tool: './tools/book.js', approval: 'required' }],
      },
    },
    files: { 'agents/assistant/tools/book.js': TOOL },
    server: { apiKey: ADMIN_KEY },
    mainModel: { timeoutMs: PATIENT_MS },
  });
  key = await issue('travel ui');
  other = await issue('someone else');
});
afterAll(async () => t.close());

describe('audit events', () => {
  for (const decision of ['approve', 'deny'] as const) {
    it(`records who chose to ${decision} a held call, on the task and in its event`, async () => {
      t.fake!.script({ tool_calls: [{ name: 'book_trip', arguments: '{}' }] }, { content: 'done' });
      const started = await as(key.secret, 'POST', '/agents/assistant/tasks?wait=true', {
        input: 'book it',
      });
      const task = started.json<{ task: { id: string; status: string } }>().task;
      expect(task.status).toBe('waiting');
      const decided = await as(key.secret, 'POST', `/tasks/${task.id}/${decision}?wait=true`, {});
      expect(decided.statusCode, decided.body).toBe(200);
      const by = { key: key.id, user: 'agent-smith' };
      expect(JSON.parse(decided.json().task.decided_by)).toEqual(by);
      const event = (await eventsOf(decision === 'approve' ? 'task.approved' : 'task.denied')).find(
        (e) => e.data['taskId'] === task.id,
      );
      expect(event?.data['by']).toEqual(by);
    });
  }

  it('records who reset, deleted and imported a session', async () => {
    const created = await as(key.secret, 'POST', '/sessions', { agentName: 'assistant' });
    const id = created.json<{ session: { id: string; end_user: string } }>().session.id;
    expect(created.json().session.end_user).toBe('agent-smith');
    const by = { key: key.id, user: 'agent-smith' };
    expect((await as(key.secret, 'POST', `/sessions/${id}/reset`)).statusCode).toBe(200);
    const exported = await as(key.secret, 'GET', `/sessions/${id}/export`);
    expect(exported.body).toContain('"end_user":"agent-smith"');
    const imported = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: {
        authorization: `Bearer ${key.secret}`,
        'content-type': 'application/x-ndjson',
      },
      payload: exported.body,
    });
    expect(imported.statusCode, imported.body).toBe(201);
    const importedId = imported.json<{ session: { id: string } }>().session.id;
    expect((await as(key.secret, 'DELETE', `/sessions/${id}`)).statusCode).toBe(204);
    expect((await eventsOf('session.reset')).find((e) => e.session_id === id)?.data['by']).toEqual(
      by,
    );
    expect(
      (await eventsOf('session.deleted')).find((e) => e.session_id === id)?.data['by'],
    ).toEqual(by);
    expect(
      (await eventsOf('session.imported')).find((e) => e.session_id === importedId)?.data['by'],
    ).toEqual({ key: key.id, user: null });
  });
});

describe("a client key's event stream", () => {
  it("carries its own sessions' events, live, and nothing of another key or the admin", async () => {
    const url = await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const controller = new AbortController();
    const response = await fetch(`${url}/events`, {
      headers: { authorization: `Bearer ${other.secret}` },
      signal: controller.signal,
    });
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    let text = '';
    const readUntil = async (needle: string) => {
      while (!text.includes(needle)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
    };
    // Another key's and the admin's activity, then the stream's own key's.
    const foreign = await as(key.secret, 'POST', '/sessions', { agentName: 'assistant' });
    const admins = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { agentName: 'assistant' },
    });
    const own = await as(other.secret, 'POST', '/sessions', { agentName: 'assistant' });
    const ownId = own.json<{ session: { id: string } }>().session.id;
    await readUntil(ownId);
    controller.abort();
    expect(text).toContain(ownId);
    expect(text).not.toContain(foreign.json<{ session: { id: string } }>().session.id);
    expect(text).not.toContain(admins.json<{ session: { id: string } }>().session.id);
    // Replayed history: none of the other key's sessions, nor key events.
    expect(text).not.toContain(key.id);
    expect(text).not.toContain('key.created');
  });
});
