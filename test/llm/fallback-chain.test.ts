/**
 * Fallback chains over real fakes of both protocols: a primary that fails for
 * good on a retryable cause hands the call to the next model (any provider),
 * the hops are reported, a circuit breaker keeps the dead primary out for a
 * minute and lets one call try it after; a request the next model would
 * refuse too never falls back. Through the app, a chat answers from the
 * fallback and the compact role falls back too.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRoleSettings } from '../../src/config/settings.js';
import { AnthropicModel } from '../../src/llm/anthropic-model.js';
import { BREAKER_OPEN_MS, CircuitBreaker, FallbackChain } from '../../src/llm/fallback-chain.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import { ModelCallError } from '../../src/llm/retry-policy.js';
import type { ModelRequest } from '../../src/llm/model-client.js';
import { startFakeAnthropicServer, type FakeAnthropicServer } from '../fakes/anthropic-server.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { startTestApp, TEST_AGENT } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';

let anthropic: FakeAnthropicServer;
let openai: FakeLlmServer;
beforeAll(async () => {
  anthropic = await startFakeAnthropicServer();
  openai = await startFakeLlmServer();
});
afterEach(() => {
  anthropic.reset();
  openai.reset();
});
afterAll(async () => {
  await anthropic.close();
  await openai.close();
});

const base = {
  apiKeyEnv: 'K',
  apiKey: 'k',
  contextWindow: 8192,
  timeoutMs: 5_000,
  maxRetries: 1,
  profile: 'openai',
} as const;
const noSleep = { sleep: async () => {} };

function chain(clock: { now: number }) {
  const primary: ModelRoleSettings = {
    ...base,
    provider: 'anthropic',
    baseURL: anthropic.baseURL,
    model: 'claude-primary',
  };
  const fallback: ModelRoleSettings = {
    ...base,
    provider: 'openai',
    baseURL: openai.baseURL,
    model: 'gpt-fallback',
  };
  const warnings: string[] = [];
  const model = new FallbackChain({
    links: [
      { settings: primary, client: new AnthropicModel({ role: primary, ...noSleep }) },
      { settings: fallback, client: new OpenAIModel({ role: fallback, ...noSleep }) },
    ],
    breaker: new CircuitBreaker({ now: () => clock.now }),
    logger: { warn: (_details, message) => warnings.push(message) },
  });
  return { model, warnings };
}

const request: ModelRequest = {
  messages: [{ role: 'user', content: 'hi' }],
  purpose: 'chat',
  model: 'claude-agent-override',
};
const primaryCalls = (): number => anthropic.requests.length;
const fallbackCalls = (): number =>
  openai.requests.filter((r) => r.path === '/v1/chat/completions').length;

describe('a fallback chain', () => {
  it('falls back after the primary is overloaded for good, reporting the hop', async () => {
    const clock = { now: 1_000_000 };
    const { model, warnings } = chain(clock);
    anthropic.script({ status: 529 }, { status: 529 });
    openai.script({ content: 'from the fallback' });
    const response = await model.complete(request);
    expect(response.message.content).toBe('from the fallback');
    expect(primaryCalls()).toBe(2); // its own retries first
    // The agent's model name is the primary's; the fallback answers with its own.
    expect(openai.requests[0]!.body.model).toBe('gpt-fallback');
    expect(response.fallbackHops).toEqual([
      {
        provider: 'anthropic',
        model: 'claude-primary',
        baseURL: anthropic.baseURL,
        skipped: false,
        reason: expect.stringMatching(/HTTP 529/),
      },
    ]);
    expect(warnings[0]).toMatch(/falling back to gpt-fallback/);
  });

  it('keeps a dead primary out for a minute, then lets one call try it again', async () => {
    const clock = { now: 2_000_000 };
    const { model } = chain(clock);
    anthropic.script({ status: 503 }, { status: 503 });
    openai.setDefault(() => ({ content: 'fallback' }));
    await model.complete(request);
    expect(primaryCalls()).toBe(2);

    clock.now += BREAKER_OPEN_MS - 1;
    const skipped = await model.complete(request);
    expect(primaryCalls()).toBe(2); // not tried
    expect(skipped.fallbackHops).toEqual([
      expect.objectContaining({ model: 'claude-primary', skipped: true, reason: 'circuit open' }),
    ]);

    clock.now += 2;
    anthropic.script({ content: 'primary is back' });
    const back = await model.complete(request);
    expect(back.message.content).toBe('primary is back');
    expect(back.fallbackHops).toBeUndefined();
    expect(anthropic.requests.at(-1)!.body.model).toBe('claude-agent-override');
  });

  it.each([
    ['a timeout', { hang: true }],
    ['a 429 with a long retry-after', { status: 429, headers: { 'retry-after': '600' } }],
  ])('falls back on %s', async (_name, fault) => {
    const clock = { now: 3_000_000 };
    const primary: ModelRoleSettings = {
      ...base,
      provider: 'anthropic',
      baseURL: anthropic.baseURL,
      model: 'claude-slow',
      timeoutMs: 500,
      maxRetries: 0,
    };
    const fallback: ModelRoleSettings = {
      ...base,
      baseURL: openai.baseURL,
      model: 'gpt',
      provider: 'openai',
    };
    const model = new FallbackChain({
      links: [
        { settings: primary, client: new AnthropicModel({ role: primary, ...noSleep }) },
        { settings: fallback, client: new OpenAIModel({ role: fallback, ...noSleep }) },
      ],
      breaker: new CircuitBreaker({ now: () => clock.now }),
    });
    anthropic.script(fault);
    openai.script({ content: 'rescued' });
    expect((await model.complete(request)).message.content).toBe('rescued');
  });

  it('does not fall back on a request the next model would refuse too', async () => {
    const { model } = chain({ now: 4_000_000 });
    anthropic.script({ status: 400 });
    const err = await model.complete(request).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelCallError);
    expect((err as ModelCallError).message).toMatch(/HTTP 400/);
    expect(fallbackCalls()).toBe(0);
  });

  it('fails with every hop when the whole chain is down, and tries it whole rather than not at all', async () => {
    const clock = { now: 5_000_000 };
    const { model } = chain(clock);
    anthropic.setDefault(() => ({ status: 529 }));
    openai.setDefault(() => ({ status: 503 }));
    const err = (await model.complete(request).catch((e: unknown) => e)) as ModelCallError;
    expect(err.code).toBe('LLM_ERROR');
    expect(err.fallbackHops?.map((h) => h.model)).toEqual(['claude-primary', 'gpt-fallback']);
    // Both circuits are open now: the next call still tries the chain.
    await model.complete(request).catch(() => undefined);
    expect(primaryCalls()).toBe(4);
  });
});

describe('fallbacks in cairn.json', () => {
  it('a chat and a compaction answer from the fallback when the primary is down', async () => {
    const t = await startTestApp({
      fake: openai,
      mainModel: {
        provider: 'anthropic',
        baseURL: anthropic.baseURL,
        model: 'claude-down',
        maxRetries: 0,
        fallbacks: [{ provider: 'openai', baseURL: openai.baseURL, model: 'gpt-up' }],
      },
      agents: { assistant: { ...TEST_AGENT, tools: [] } },
      env: { ANTHROPIC_API_KEY: 'k' },
    });
    try {
      anthropic.setDefault(() => ({ status: 529 }));
      openai.setDefault(() => ({ content: 'answered by the fallback' }));
      const res = await t.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: 'hello' },
      });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json().reply).toBe('answered by the fallback');
      const sessionId = res.json().sessionId as string;
      for (const message of ['second', 'third'])
        await t.app.server.inject({
          method: 'POST',
          url: '/agents/assistant/chat',
          payload: { message, sessionId },
        });
      const compacted = await t.app.server.inject({
        method: 'POST',
        url: `/sessions/${sessionId}/compact`,
      });
      expect(compacted.statusCode, compacted.body).toBe(200);
      expect(openai.requests.some((r) => isSummaryRequest(r.body))).toBe(true);
    } finally {
      await t.close();
    }
  });
});
