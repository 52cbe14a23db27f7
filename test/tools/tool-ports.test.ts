/**
 * A tool module in the agent's folder is the agent author's code: it gets two
 * narrow ports (history search and memory), never the store itself, so it
 * cannot reach another session's messages or the key table by a cast.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const INSPECTING_TOOL = `export default {
  name: 'inspect',
  description: 'Says what its context holds',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run(_args, ctx) {
    const names = (port) => Object.keys(port).sort().join(',');
    const hits = await ctx.history.searchHistory(ctx.sessionId, 'hello', 5);
    return JSON.stringify({
      history: names(ctx.history),
      memory: names(ctx.memory),
      appendOnHistory: typeof ctx.history.appendMessages,
      keysOnMemory: typeof ctx.memory.listKeys,
      hits: hits.length,
    });
  },
};
`;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({
    agents: { assistant: { ...TEST_AGENT, tools: ['./tools/inspect.js'] } },
    files: { 'agents/assistant/tools/inspect.js': INSPECTING_TOOL },
  });
});
afterAll(async () => t?.close());

describe('what a tool gets', () => {
  it('two ports with their own methods only, which work', async () => {
    t.fake!.script({ tool_calls: [{ name: 'inspect', arguments: '{}' }] }, { content: 'seen' });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hello there' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const result = res
      .json<{ messages: { role: string; content: string | null }[] }>()
      .messages.find((m) => m.role === 'tool');
    expect(JSON.parse(result!.content!)).toEqual({
      history: 'searchHistory',
      memory: 'deleteMemory,listMemory,putMemory',
      appendOnHistory: 'undefined',
      keysOnMemory: 'undefined',
      hits: 1,
    });
  });
});
