/**
 * GET /sessions/:id/context counts memory notes apart (`tokens.memory`), so
 * the console's context bar can show system / memory / summary / raw.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const NOTED = {
  name: 'noted',
  description: 'Keeps notes',
  system: 'You keep notes.',
  tools: [],
  maxIterations: 3,
  memory: { enabled: true, maxChars: 2000 },
};

interface Context {
  messages: (ChatMessage & { content: string })[];
  tokens: { system: number; memory: number; summary: number; raw: number; total: number };
}

describe('context tokens with memory', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { noted: NOTED } });
  });
  afterAll(async () => t.close());

  async function context(sessionId: string): Promise<Context> {
    const res = await t.app.server.inject({ url: `/sessions/${sessionId}/context` });
    expect(res.statusCode).toBe(200);
    return res.json<Context>();
  }

  it('is 0 without notes, and the parts add up to the total', async () => {
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'noted' },
    });
    const { tokens } = await context(created.json().session.id);
    expect(tokens.memory).toBe(0);
    expect(tokens.system).toBe(estimateMessagesTokens([{ role: 'system', content: NOTED.system }]));
    expect(tokens.system + tokens.memory + tokens.summary + tokens.raw).toBe(tokens.total);
  });

  it('counts the memory block apart from the system prompt', async () => {
    const put = await t.app.server.inject({
      method: 'PUT',
      url: '/agents/noted/memory/city',
      payload: { content: 'The user lives in Lyon and likes long answers.' },
    });
    expect(put.statusCode).toBe(200);
    t.fake!.script({ content: 'Noted.' });
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/noted/chat',
      payload: { message: 'Hello' },
    });
    expect(chat.statusCode).toBe(200);
    const { messages, tokens } = await context(chat.json().sessionId);

    const memoryMessage = messages[1]!;
    expect(memoryMessage.role).toBe('system');
    expect(memoryMessage.content).toContain('Lyon');
    expect(tokens.memory).toBe(estimateMessagesTokens([memoryMessage]));
    expect(tokens.system).toBe(estimateMessagesTokens([messages[0]!]));
    expect(tokens.raw).toBe(estimateMessagesTokens(messages.slice(2)));
    expect(tokens.system + tokens.memory + tokens.summary + tokens.raw).toBe(tokens.total);
  });
});
