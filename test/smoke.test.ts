import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/test-app.js';

describe('end to end: agent → chat → SQLite → model server → reply', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t.close());

  it('answers a chat with the model reply and stores both messages', async () => {
    t.fake!.script({ content: 'Hello from the fake model' });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi' },
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.reply).toBe('Hello from the fake model');
    const messages = await t.app.server.inject({ url: `/sessions/${body.sessionId}/messages` });
    expect(messages.json().messages.map((m: { role: string }) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
    ]);
    const sent = t.fake!.requests.at(-1)!.body;
    expect(sent.messages.map((m: { role: string }) => m.role)).toEqual(['system', 'user']);
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });
});
