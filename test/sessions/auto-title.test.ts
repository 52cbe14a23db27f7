/**
 * Automatic session titles (agent `autoTitle`): one call on the
 * compact role after the first exchange of an untitled chat session, in the
 * background; off by default, never failing the turn, never overwriting a
 * title that is already set.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { cleanTitle, TITLE_PROMPT } from '../../src/runtime/session-titler.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const isTitleRequest = (body: any): boolean => body?.messages?.[0]?.content === TITLE_PROMPT;

describe('automatic session titles', () => {
  let t: TestApp;
  let titleReply: () => { content: string } | { status: number };
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: TEST_AGENT,
        titled: { ...TEST_AGENT, name: 'titled', autoTitle: true },
      },
    });
  });
  afterAll(() => t.close());
  beforeEach(() => {
    t.fake!.reset();
    titleReply = () => ({ content: '"Planning a trip to Paris."\nextra line' });
    t.fake!.setDefault((body) => (isTitleRequest(body) ? titleReply() : { content: 'Sure.' }));
  });

  const chat = async (agent: string, payload: Record<string, unknown>) => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: `/agents/${agent}/chat`,
      payload,
    });
    expect(res.statusCode).toBe(200);
    return res.json<{ sessionId: string; reply: string }>();
  };
  const titleOf = async (id: string): Promise<string | null> =>
    (await t.app.server.inject({ method: 'GET', url: `/sessions/${id}` })).json().session.title;
  const titleRequests = () => t.fake!.requests.filter((r) => isTitleRequest(r.body));

  it('titles a new session from its first exchange, once', async () => {
    const first = await chat('titled', { message: 'Help me plan a trip to Paris' });
    expect(first.reply).toBe('Sure.');
    await expect.poll(() => titleOf(first.sessionId)).toBe('Planning a trip to Paris');
    const [request] = titleRequests();
    expect(request!.body.messages[1].content).toContain('Help me plan a trip to Paris');
    expect(request!.body.messages[1].content).toContain('Sure.');
    expect(request!.body.tools).toBeUndefined();

    await chat('titled', { message: 'And Rome?', sessionId: first.sessionId });
    expect(titleRequests()).toHaveLength(1);
    expect(await titleOf(first.sessionId)).toBe('Planning a trip to Paris');
  });

  it('is off by default', async () => {
    const { sessionId } = await chat('assistant', { message: 'Help me plan a trip' });
    await chat('assistant', { message: 'Again', sessionId });
    expect(titleRequests()).toHaveLength(0);
    expect(await titleOf(sessionId)).toBeNull();
  });

  it('keeps a title the session already has', async () => {
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'titled', title: 'My own title' },
    });
    expect(created.statusCode).toBe(201);
    const id = created.json().session.id as string;
    await chat('titled', { message: 'Hello', sessionId: id });
    await chat('titled', { message: 'Hello again', sessionId: id });
    expect(titleRequests()).toHaveLength(0);
    expect(await titleOf(id)).toBe('My own title');
  });

  it('a failing title call neither fails the turn nor sets a title', async () => {
    titleReply = () => ({ status: 400 });
    const first = await chat('titled', { message: 'Hello there' });
    expect(first.reply).toBe('Sure.');
    await expect.poll(() => titleRequests().length).toBe(1);
    // The next turn is answered after the failed title call was.
    await chat('titled', { message: 'Still there?', sessionId: first.sessionId });
    expect(await titleOf(first.sessionId)).toBeNull();
  });

  it('the title call goes to the compact role, not the main model', async () => {
    const split = await startTestApp({
      compactModel: { model: 'small-model' },
      agents: { titled: { ...TEST_AGENT, name: 'titled', autoTitle: true } },
    });
    try {
      split.fake!.setDefault((body) =>
        isTitleRequest(body) ? { content: 'Trip to Paris' } : { content: 'Sure.' },
      );
      const res = await split.app.server.inject({
        method: 'POST',
        url: '/agents/titled/chat',
        payload: { message: 'Help me plan a trip to Paris' },
      });
      expect(res.statusCode).toBe(200);
      await expect
        .poll(() => split.fake!.requests.filter((r) => isTitleRequest(r.body)).length)
        .toBe(1);
      const models = split.fake!.requests.map((r) => [isTitleRequest(r.body), r.body.model]);
      expect(models).toEqual([
        [false, 'test-model'],
        [true, 'small-model'],
      ]);
    } finally {
      await split.close();
    }
  });

  it('with the offline model, a session is named by the first words the user wrote', async () => {
    const offline = await startTestApp({
      fake: null,
      agents: { titled: { ...TEST_AGENT, name: 'titled', autoTitle: true } },
    });
    try {
      const res = await offline.app.server.inject({
        method: 'POST',
        url: '/agents/titled/chat',
        payload: { message: 'Help me plan a trip to Paris next week' },
      });
      expect(res.statusCode).toBe(200);
      const { sessionId, reply } = res.json<{ sessionId: string; reply: string }>();
      expect(reply).toMatch(/^\[offline model\]/);
      await expect
        .poll(
          async () =>
            (
              await offline.app.server.inject({ method: 'GET', url: `/sessions/${sessionId}` })
            ).json().session.title,
        )
        .toBe('Help me plan a trip');
    } finally {
      await offline.close();
    }
  });

  it('cleans the reply: first line, no quotes or final stop, at most 80 characters', () => {
    expect(cleanTitle('  "Trip to Paris."  \nmore')).toBe('Trip to Paris');
    expect(cleanTitle('**Budget review**')).toBe('Budget review');
    expect(cleanTitle('x'.repeat(200))).toHaveLength(80);
    expect(cleanTitle('   ')).toBe('');
  });
});
