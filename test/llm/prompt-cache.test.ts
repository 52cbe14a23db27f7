/**
 * Prompt caching through the real app: with an Anthropic role the session
 * sums the cache reads and writes the provider reports, every role (main,
 * compact, title) speaks the Messages API, and whatever a session goes
 * through no request is one the API refuses. On the OpenAI path each call
 * carries the session id as `prompt_cache_key` and the cached tokens OpenAI
 * reports are summed on the session too.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RECALL_OPEN } from '../../src/recall/recall-block.js';
import {
  estimateAnthropicPromptTokens,
  startFakeAnthropicServer,
  type FakeAnthropicReply,
  type FakeAnthropicServer,
} from '../fakes/anthropic-server.js';
import { seedSession, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

/** The summariser's calls carry its system prompt, which speaks of the rolling summary. */
function isSummaryCall(body: { system?: { text: string }[] }): boolean {
  return (body.system ?? []).some((b) => b.text.includes('rolling summary'));
}

describe('an Anthropic-backed agent', () => {
  let fake: FakeAnthropicServer;
  let t: TestApp;
  const queue: FakeAnthropicReply[] = [];

  beforeAll(async () => {
    fake = await startFakeAnthropicServer({ minCacheableTokens: 50 });
    t = await startTestApp({
      fake: null,
      agents: {
        assistant: {
          ...TEST_AGENT,
          system: 'You are a test assistant. Answer briefly and precisely. '.repeat(8),
          tools: ['current_time', 'ask_user'],
          maxIterations: 8,
          defaultCompaction: { autoThreshold: 50, maxSummaryChars: 600 },
        },
      },
      mainModel: {
        provider: 'anthropic',
        baseURL: fake.baseURL,
        model: 'claude-test',
        maxRetries: 0,
        timeoutMs: 5_000,
        contextWindow: 2_000,
      },
      env: { ANTHROPIC_API_KEY: 'sk-ant-test' },
    });
    fake.setDefault((body) =>
      isSummaryCall(body)
        ? { content: 'Summary: the user chatted about lorem.' }
        : (queue.shift() ?? { content: 'ok' }),
    );
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });

  const post = (url: string, payload?: Record<string, unknown>) =>
    t.app.server.inject({ method: 'POST', url, ...(payload ? { payload } : {}) });

  it('sums cache reads and writes on the session, and the next turn reads the prefix', async () => {
    fake.requests.length = 0;
    const created = await post('/sessions', { agentName: 'assistant' });
    const sessionId = created.json().session.id as string;
    queue.push({ tool_calls: [{ name: 'current_time', arguments: '{}' }] }, { content: 'noon' });
    const first = await post('/agents/assistant/chat', { message: 'what time is it?', sessionId });
    expect(first.statusCode, first.body).toBe(200);
    const second = await post('/agents/assistant/chat', { message: 'thanks', sessionId });
    expect(second.statusCode, second.body).toBe(200);

    const main = fake.requests.filter((r) => !isSummaryCall(r.body) && r.usage);
    expect(main.length).toBeGreaterThanOrEqual(3);
    for (const request of fake.requests) expect(request.problems).toEqual([]);
    // The tool loop's second call and the next turn read what the call before wrote.
    expect(main[1]!.usage!.cache_read_input_tokens).toBeGreaterThan(0);
    expect(main.at(-1)!.usage!.cache_read_input_tokens).toBeGreaterThan(0);

    const session = (await t.app.store.findSession(sessionId))!;
    const sum = (key: 'cache_read_input_tokens' | 'cache_creation_input_tokens'): number =>
      main.reduce((n, r) => n + r.usage![key], 0);
    expect(session.cache_read_tokens).toBe(sum('cache_read_input_tokens'));
    expect(session.cache_write_tokens).toBe(sum('cache_creation_input_tokens'));
    expect(session.input_tokens).toBeGreaterThanOrEqual(
      session.cache_read_tokens + session.cache_write_tokens,
    );
    const shown = await t.app.server.inject({ url: `/sessions/${sessionId}` });
    expect(shown.json().session.cache_read_tokens).toBe(session.cache_read_tokens);
  });

  it('with automatic recall on, each turn reads the whole history before the recalled block', async () => {
    fake.requests.length = 0;
    const fact = 'The gym locker code is 4812, and the spare key is under the blue mat.';
    const sessionId = await seedSession(
      t.app,
      Array.from({ length: 16 }, (_, i) => ({
        role: i % 2 === 0 ? 'user' : 'assistant',
        content: i === 2 ? fact : `Filler message ${i} about the weather and lunch plans.`,
      })),
    );
    const compacted = await post(`/sessions/${sessionId}/compact`);
    expect(compacted.statusCode, compacted.body).toBe(200);
    for (const message of [
      'What is the locker code at the gym?',
      'Where is the spare key for the gym locker?',
      'Is the gym locker code 4812?',
    ]) {
      const res = await post('/agents/assistant/chat', { message, sessionId });
      expect(res.statusCode, res.body).toBe(200);
    }
    type Body = { messages: { content: { text?: string }[] }[] };
    const main = fake.requests.filter((r) => !isSummaryCall(r.body) && r.usage);
    expect(main).toHaveLength(3);
    for (const r of main) {
      // Each call carried a recalled block, merged into its last (user) message.
      const last = (r.body as Body).messages.at(-1)!.content;
      expect(last.some((b) => (b.text ?? '').startsWith(RECALL_OPEN))).toBe(true);
    }
    for (let k = 1; k < main.length; k++) {
      const before = main[k - 1]!.body as Body;
      const history = { ...before, messages: before.messages.slice(0, -1) };
      expect(main[k]!.usage!.cache_read_input_tokens).toBe(estimateAnthropicPromptTokens(history));
    }
  });

  it('a tool call cut at max_tokens runs nothing and is not stored; the model is told', async () => {
    fake.requests.length = 0;
    queue.push(
      {
        tool_calls: [{ name: 'current_time', arguments: '{"timezone":"Eur' }],
        stop_reason: 'max_tokens',
      },
      { content: 'answered in text' },
    );
    const res = await post('/agents/assistant/chat', { message: 'time in Europe?' });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().reply).toBe('answered in text');
    const stored = await t.app.store.listMessages(res.json().sessionId as string, {
      afterSeq: 0,
      limit: 100,
    });
    expect(stored.some((m) => m.tool_calls !== undefined || m.role === 'tool')).toBe(false);
    const retry = fake.requests.filter((r) => !isSummaryCall(r.body)).at(-1)!;
    const lastUser = retry.body.messages.at(-1) as { content: { text: string }[] };
    expect(lastUser.content.map((b) => b.text).join(' ')).toMatch(/cut off at the token limit/);
  });

  it('no sequence of chats, tool calls, questions, compactions and resets sends a request the API refuses', async () => {
    type Step = 'text' | 'tools' | 'ask' | 'compact' | 'reset';
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom<Step>('text', 'text', 'tools', 'ask', 'compact', 'reset'), {
          minLength: 3,
          maxLength: 10,
        }),
        fc.integer({ min: 1, max: 120 }),
        async (steps, words) => {
          fake.requests.length = 0;
          queue.length = 0;
          const created = await post('/sessions', { agentName: 'assistant' });
          const sessionId = created.json().session.id as string;
          for (const [i, step] of steps.entries()) {
            const message = `m${i} ${'lorem '.repeat(words)}`;
            if (step === 'compact') {
              expect((await post(`/sessions/${sessionId}/compact`)).statusCode).toBe(200);
              continue;
            }
            if (step === 'reset') {
              expect((await post(`/sessions/${sessionId}/reset`)).statusCode).toBe(200);
              continue;
            }
            if (step === 'tools')
              queue.push(
                {
                  tool_calls: [
                    { name: 'current_time', arguments: '{}' },
                    { name: 'current_time', arguments: '' },
                  ],
                },
                { content: `answer ${i}` },
              );
            if (step === 'ask')
              queue.push({
                tool_calls: [{ name: 'ask_user', arguments: '{"question":"which?"}' }],
              });
            if (step === 'text') queue.push({ content: `answer ${i} ${'ipsum '.repeat(words)}` });
            const res = await post('/agents/assistant/chat', { message, sessionId });
            expect(res.statusCode, res.body).toBe(200);
          }
          for (const request of fake.requests) expect(request.problems).toEqual([]);
        },
      ),
      { numRuns: 25 },
    );
    // The runs did reach the summariser through the Messages API.
    const events = await t.app.store.listEvents({ afterId: 0, limit: 100_000 });
    expect(events.some((e) => e.type === 'context.defaultCompacted')).toBe(true);
  }, 120_000);
});

describe('every role on the Messages API', () => {
  it('main, compact and title all speak Anthropic (title with the model it inherits from compact)', async () => {
    const fake = await startFakeAnthropicServer();
    const t = await startTestApp({
      fake: null,
      agents: { assistant: { ...TEST_AGENT, tools: [], autoTitle: true } },
      mainModel: {
        provider: 'anthropic',
        baseURL: fake.baseURL,
        model: 'claude-main',
        maxRetries: 0,
      },
      compactModel: { model: 'claude-compact' },
      env: { ANTHROPIC_API_KEY: 'sk-ant-test' },
    });
    try {
      expect(t.app.settings.models.title.model).toBe('claude-compact');
      fake.setDefault((body: { system?: { text: string }[] }) =>
        (body.system ?? []).some((b) => b.text.includes('Write a title'))
          ? { content: 'Greetings exchanged' }
          : { content: 'hello there' },
      );
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: 'hello' },
      });
      expect(res.statusCode, res.body).toBe(200);
      const sessionId = res.json().sessionId as string;
      for (const m of ['more', 'and more']) {
        await t.app.server.inject({
          method: 'POST',
          url: '/agents/assistant/chat',
          payload: { message: m, sessionId },
        });
      }
      const compacted = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${sessionId}/compact`,
      });
      expect(compacted.statusCode, compacted.body).toBe(200);
      let title: string | null = null;
      while (title === null) {
        title = (await t.app.store.findSession(sessionId))!.title;
        if (title === null) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(title).toBe('Greetings exchanged');
      const models = new Set(fake.requests.map((r) => r.body.model as string));
      expect(models).toEqual(new Set(['claude-main', 'claude-compact']));
      for (const request of fake.requests) expect(request.problems).toEqual([]);
    } finally {
      await t.close();
      await fake.close();
    }
  });
});

describe('the OpenAI path', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => t.close());

  it('sends the session id as prompt_cache_key and sums the cached tokens OpenAI reports', async () => {
    const created = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    const sessionId = created.json().session.id as string;
    t.fake!.script({
      content: 'hello',
      usage: {
        prompt_tokens: 2_000,
        completion_tokens: 5,
        prompt_tokens_details: { cached_tokens: 1_536 },
      },
    });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi', sessionId },
    });
    expect(res.statusCode, res.body).toBe(200);
    const sent = t.fake!.requests.find(
      (r) =>
        r.path === '/v1/chat/completions' &&
        r.body.messages.some((m: { content: unknown }) => m.content === 'hi'),
    )!;
    expect(sent.problems).toEqual([]);
    expect(sent.body.prompt_cache_key).toBe(sessionId);
    const session = (await t.app.store.findSession(sessionId))!;
    expect(session.cache_read_tokens).toBe(1_536);
    expect(session.cache_write_tokens).toBe(0);
    expect(session.input_tokens).toBe(2_000);
  });

  it('/v1 answers carry the cached tokens the agent’s provider reported', async () => {
    const cached = { prompt_tokens_details: { cached_tokens: 1_024 } };
    t.fake!.script(
      { content: 'a', usage: { prompt_tokens: 1_500, completion_tokens: 3, ...cached } },
      { content: 'b', usage: { prompt_tokens: 1_500, completion_tokens: 3, ...cached } },
    );
    const completion = await t.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { model: 'assistant', messages: [{ role: 'user', content: 'cached?' }] },
    });
    expect(completion.statusCode, completion.body).toBe(200);
    expect(completion.json().usage.prompt_tokens_details).toEqual({ cached_tokens: 1_024 });
    const response = await t.app.server.inject({
      method: 'POST',
      url: '/v1/responses',
      payload: { model: 'assistant', input: 'cached too?' },
    });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().usage.input_tokens_details.cached_tokens).toBe(1_024);
  });
});
