/**
 * A subagent works for whoever its caller works for: the session it runs in
 * belongs to the caller's client key and end user, so that key lists it and
 * another key cannot read it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'subagent-admin';
let t: TestApp;

function agent(name: string, tools: string[]) {
  return { name, description: `Agent ${name}`, system: `You are agent ${name}.`, tools };
}

async function issue(name: string): Promise<string> {
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name },
  });
  return res.json<{ secret: string }>().secret;
}

beforeAll(async () => {
  t = await startTestApp({
    agents: { boss: agent('boss', ['agent:researcher']), researcher: agent('researcher', []) },
    server: { apiKey: ADMIN_KEY },
  });
});
afterAll(async () => t.close());

describe("a subagent's session", () => {
  it("belongs to the caller's key and end user", async () => {
    const mine = await issue('mine');
    const theirs = await issue('theirs');
    t.fake!.setDefault((body: { messages: { content: string | null }[] }) =>
      body.messages[0]?.content === 'You are agent researcher.'
        ? { content: 'an answer' }
        : { content: 'done' },
    );
    t.fake!.script({
      tool_calls: [{ name: 'agent_researcher', arguments: JSON.stringify({ input: 'look' }) }],
    });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/boss/chat',
      headers: { authorization: `Bearer ${mine}`, 'x-cairn-user': 'ann' },
      payload: { message: 'research' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const parent = res.json<{ sessionId: string }>().sessionId;
    const list = (secret: string) =>
      t.app.server.inject({
        url: `/sessions?parentSessionId=${parent}`,
        headers: { authorization: `Bearer ${secret}` },
      });
    const children = (await list(mine)).json<{
      sessions: { id: string; owner_key: string; end_user: string }[];
    }>().sessions;
    expect(children).toHaveLength(1);
    const owner = (await t.app.store.findSession(parent))!.owner_key;
    expect(children[0]).toMatchObject({ owner_key: owner, end_user: 'ann' });
    expect((await list(theirs)).json().sessions).toEqual([]);
    const read = await t.app.server.inject({
      url: `/sessions/${children[0]!.id}`,
      headers: { authorization: `Bearer ${theirs}` },
    });
    expect(read.statusCode).toBe(404);
  });
});
