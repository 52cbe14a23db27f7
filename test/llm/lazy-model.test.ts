/**
 * lazyModel: a role's client loads on its first call, once, and a load that
 * failed is tried again on the next call.
 */
import { describe, expect, it } from 'vitest';
import { lazyModel } from '../../src/llm/lazy-model.js';
import type { ModelClient } from '../../src/llm/model-client.js';

const loaded: ModelClient = {
  model: 'inner',
  contextWindow: 1,
  complete: async (request) => ({
    message: { role: 'assistant', content: `got ${request.messages.length}` },
    finishReason: 'stop',
    usage: null,
    model: 'inner',
  }),
};

describe('lazyModel', () => {
  it('answers model and window without loading, and loads once for any number of calls', async () => {
    let loads = 0;
    const model = lazyModel('claude-x', 200_000, async () => {
      loads += 1;
      return loaded;
    });
    expect([model.model, model.contextWindow, loads]).toEqual(['claude-x', 200_000, 0]);
    const request = {
      messages: [{ role: 'user' as const, content: 'hi' }],
      purpose: 'chat' as const,
    };
    const answers = await Promise.all([model.complete(request), model.complete(request)]);
    expect(answers.map((a) => a.message.content)).toEqual(['got 1', 'got 1']);
    await model.complete(request);
    expect(loads).toBe(1);
  });

  it('fails the call whose load failed, and loads again on the next', async () => {
    let loads = 0;
    const model = lazyModel('m', 1, async () => {
      loads += 1;
      if (loads === 1) throw new Error('Cannot find package');
      return loaded;
    });
    const request = { messages: [], purpose: 'chat' as const };
    await expect(model.complete(request)).rejects.toThrow('Cannot find package');
    expect((await model.complete(request)).message.content).toBe('got 0');
    expect(loads).toBe(2);
  });
});
