/**
 * Transcript matching under principals: a /v1 conversation continues a
 * session only of the same client key, the same end user and the same
 * posted system/developer messages. Two users of one chat UI who open with
 * the same words never share a session, and the model never sees the other
 * user's facts (checked in the fake model's request log).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'transcript-admin';

let harness: TestApp;
let chatUi: string;
let otherUi: string;

interface Posted {
  role: 'system' | 'developer' | 'user' | 'assistant';
  content: string;
}

async function complete(
  secret: string,
  messages: Posted[],
  extra: Record<string, unknown> = {},
): Promise<{ sessionId: string; status: number }> {
  const res = await harness.app.server.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: `Bearer ${secret}` },
    payload: { model: 'assistant', messages, ...extra },
  });
  return { sessionId: String(res.headers['x-cairn-session-id']), status: res.statusCode };
}

/** Everything the fake model was sent since the last reset, as one string. */
function modelSaw(): string {
  return JSON.stringify(harness.fake!.requests.map((r) => r.body?.messages));
}

async function issue(name: string): Promise<string> {
  const res = await harness.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name },
  });
  return res.json<{ secret: string }>().secret;
}

beforeAll(async () => {
  harness = await startTestApp({ server: { apiKey: ADMIN_KEY } });
  chatUi = await issue('chat ui');
  otherUi = await issue('other ui');
});

beforeEach(() => {
  harness.fake!.reset();
  harness.fake!.setDefault(() => ({ content: 'Hello! How can I help?' }));
});

afterAll(async () => {
  await harness.close();
});

const profileA: Posted = { role: 'system', content: 'User profile: Alice, SSN 111-11-1111' };
const profileB: Posted = { role: 'system', content: 'User profile: Bob, SSN 222-22-2222' };
const hello: Posted = { role: 'user', content: 'hello' };
const reply: Posted = { role: 'assistant', content: 'Hello! How can I help?' };

describe('transcript matching is scoped to key, end user and posted instructions', () => {
  it('never merges two end users of one chat UI who open with the same words', async () => {
    const alice = await complete(chatUi, [profileA, hello], { user: 'alice' });
    const bob = await complete(chatUi, [profileB, hello], { user: 'bob' });
    expect(alice.status).toBe(200);
    expect(bob.sessionId).not.toBe(alice.sessionId);

    harness.fake!.reset();
    harness.fake!.setDefault(() => ({ content: 'noted' }));
    const aliceAgain = await complete(
      chatUi,
      [profileA, hello, reply, { role: 'user', content: 'what do you know about me?' }],
      { user: 'alice' },
    );
    expect(aliceAgain.sessionId).toBe(alice.sessionId);
    const bobAgain = await complete(
      chatUi,
      [profileB, hello, reply, { role: 'user', content: 'and about me?' }],
      { safety_identifier: 'bob' },
    );
    expect(bobAgain.sessionId).toBe(bob.sessionId);
    const [toAlice, toBob] = harness.fake!.requests.map((r) => JSON.stringify(r.body?.messages));
    expect(toAlice).toContain('111-11-1111');
    expect(toAlice).not.toContain('222-22-2222');
    expect(toBob).toContain('222-22-2222');
    expect(toBob).not.toContain('111-11-1111');
    const sessions = await harness.app.store.listSessions({ endUser: 'alice', limit: 10 });
    expect(sessions.items.map((s) => s.id)).toEqual([alice.sessionId]);
  });

  it('never merges conversations that differ only in their system or developer message', async () => {
    const first = await complete(chatUi, [{ role: 'developer', content: 'Plan A' }, hello]);
    const second = await complete(chatUi, [{ role: 'developer', content: 'Plan B' }, hello]);
    harness.fake!.reset();
    harness.fake!.setDefault(() => ({ content: 'ok' }));
    const next = await complete(chatUi, [
      { role: 'developer', content: 'Plan B' },
      hello,
      reply,
      { role: 'user', content: 'go on' },
    ]);
    expect(next.sessionId).toBe(second.sessionId);
    expect(next.sessionId).not.toBe(first.sessionId);
    expect(modelSaw()).not.toContain('Plan A');
    // A conversation whose instructions changed is another conversation.
    const changed = await complete(chatUi, [
      { role: 'developer', content: 'Plan C' },
      hello,
      reply,
      { role: 'user', content: 'go on' },
    ]);
    expect([first.sessionId, second.sessionId]).not.toContain(changed.sessionId);
  });

  it('never merges the same end user and words across two keys, nor a named user with an unnamed one', async () => {
    const mine = await complete(chatUi, [hello], { user: 'dave' });
    const theirs = await complete(otherUi, [hello], { user: 'dave' });
    const unnamed = await complete(chatUi, [hello]);
    const nextTheirs = await complete(otherUi, [hello, reply, { role: 'user', content: 'x' }], {
      user: 'dave',
    });
    expect(nextTheirs.sessionId).toBe(theirs.sessionId);
    const nextUnnamed = await complete(chatUi, [hello, reply, { role: 'user', content: 'y' }]);
    expect(nextUnnamed.sessionId).not.toBe(mine.sessionId);
    expect(nextUnnamed.sessionId).not.toBe(theirs.sessionId);
    // Unnamed conversations under one key with identical messages are one (documented).
    expect(nextUnnamed.sessionId).toBe(unnamed.sessionId);
    const owner = await harness.app.store.findSession(theirs.sessionId);
    expect(owner?.end_user).toBe('dave');
  });

  it('takes the end user from X-Cairn-User when the body names none, and refuses one that cannot be a name', async () => {
    const res = await harness.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${chatUi}`, 'x-cairn-user': 'erin' },
      payload: { model: 'assistant', messages: [hello] },
    });
    const id = String(res.headers['x-cairn-session-id']);
    expect((await harness.app.store.findSession(id))?.end_user).toBe('erin');
    const before = (await harness.app.store.listSessions({ limit: 500 })).items.length;
    const bad = await complete(chatUi, [hello], { user: 'x'.repeat(201) });
    expect(bad.status).toBe(400);
    expect((await harness.app.store.listSessions({ limit: 500 })).items).toHaveLength(before);
  });
});
