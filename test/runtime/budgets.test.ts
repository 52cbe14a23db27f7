/**
 * Per-agent budgets (`limits` in agent.json) through the real app: a turn
 * that reaches maxToolCalls, or whose next call's claim (prompt estimate plus
 * requested output) would pass maxTurnTokens or maxSessionTokens, stops with
 * 429 BUDGET_EXCEEDED naming the limit and where to raise it, before that
 * call is sent; what it did is stored and the session stays usable;
 * compaction tokens count, and a summary is held against the turn's and the
 * session's limits before it is asked for; a daemon whose tick hit its budget
 * is skipped afterwards and says so once; a bad `limits` block is refused
 * with its path.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { loadAgents } from '../../src/agents/load-agents.js';
import { OVER_BUDGET_TOOL_RESULT } from '../../src/runtime/loop.js';
import { seedSession, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { CONTEXT_OVERFLOW_REPLY } from '../fakes/llm-server.js';

let t: TestApp | undefined;
afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function appWith(limits: Record<string, number>, extra: Record<string, unknown> = {}) {
  t = await startTestApp({
    agents: { assistant: { ...TEST_AGENT, tools: ['current_time'], limits, ...extra } },
  });
  return t;
}

const chat = (app: TestApp, message: string, sessionId?: string) =>
  app.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message, ...(sessionId ? { sessionId } : {}) },
  });

const usage = (prompt: number, completion: number) => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
});
const LIMIT = 20_000;
const OVERFLOW = CONTEXT_OVERFLOW_REPLY;
const toolCalls = (n: number) =>
  Array.from({ length: n }, () => ({ name: 'current_time', arguments: '{}' }));

describe('limits.maxToolCalls', () => {
  it('runs the calls within the limit, answers the rest "not run", stops with BUDGET_EXCEEDED', async () => {
    const app = await appWith({ maxToolCalls: 2 });
    const created = await app.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    const sessionId = created.json().session.id as string;
    app.fake!.script({ tool_calls: toolCalls(3) }, { content: 'must not be reached' });
    const res = await chat(app, 'what time is it, three times?', sessionId);
    expect(res.statusCode).toBe(429);
    expect(res.json().error.code).toBe('BUDGET_EXCEEDED');
    expect(res.json().error.message).toMatch(/limits\.maxToolCalls \(2\)/);
    expect(res.json().error.message).toContain('agents/assistant/agent.json');

    const stored = await app.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
    const results = stored.filter((m) => m.role === 'tool');
    expect(results).toHaveLength(3);
    expect(results.filter((m) => m.content === OVER_BUDGET_TOOL_RESULT)).toHaveLength(1);
    // The session goes on, and the stored history is a valid request.
    app.fake!.script({ content: 'fine' });
    const next = await chat(app, 'just answer', sessionId);
    expect(next.statusCode, next.body).toBe(200);
    for (const request of app.fake!.requests) expect(request.problems).toEqual([]);
  });
});

describe('limits.maxTurnTokens', () => {
  it('stops before the model call that would go past it, keeping what the turn did', async () => {
    const app = await appWith({ maxTurnTokens: 1_000 });
    app.fake!.script(
      { tool_calls: toolCalls(1), usage: usage(600, 100) },
      { tool_calls: toolCalls(1), usage: usage(600, 100) },
      { content: 'must not be reached' },
    );
    const res = await chat(app, 'loop for a while');
    expect(res.statusCode).toBe(429);
    expect(res.json().error.message).toMatch(/used 1400 tokens.*limits\.maxTurnTokens \(1000\)/);
    expect(app.fake!.requests.filter((r) => !isSummaryRequest(r.body))).toHaveLength(2);
  });
});

describe('limits.maxTurnTokens, held before the call', () => {
  it('refuses a call whose prompt and requested output would pass it: the provider receives nothing', async () => {
    t = await startTestApp({
      agents: {
        assistant: { ...TEST_AGENT, tools: ['current_time'], limits: { maxTurnTokens: 1_000 } },
      },
      // Every call asks for up to 400 tokens of output: the claim counts them.
      mainModel: { maxOutputTokens: 400 },
    });
    t.fake!.script(
      { tool_calls: toolCalls(1), usage: usage(600, 100) },
      { content: 'must not be reached' },
    );
    const res = await chat(t, 'loop for a while');
    expect(res.statusCode).toBe(429);
    expect(res.json().error.code).toBe('BUDGET_EXCEEDED');
    // 700 used + (prompt estimate + 400) > 1000: the second call is never sent.
    expect(res.json().error.message).toMatch(
      /used 700 tokens and its next model call needs \d+ .*limits\.maxTurnTokens \(1000\)/,
    );
    expect(t.fake!.requests).toHaveLength(1);
    // What the turn did is kept: the tool call and its result.
    const [session] = (await t.app.server.inject({ url: '/sessions' })).json().sessions as {
      id: string;
    }[];
    const messages = await t.app.store.listMessages(session!.id, { afterSeq: 0, limit: 100 });
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
  });
});

describe('limits.maxSessionTokens', () => {
  it('refuses a turn whose first call would pass it, before it is sent', async () => {
    t = await startTestApp({
      agents: {
        assistant: { ...TEST_AGENT, tools: ['current_time'], limits: { maxSessionTokens: 1_000 } },
      },
      mainModel: { maxOutputTokens: 400 },
    });
    t.fake!.setDefault(() => ({ content: 'ok', usage: usage(700, 100) }));
    const first = await chat(t, 'one');
    expect(first.statusCode, first.body).toBe(200);
    const sessionId = first.json().sessionId as string;
    // 800 used: within the limit, but not with another call's 400 of output.
    const second = await chat(t, 'two', sessionId);
    expect(second.statusCode).toBe(429);
    expect(second.json().error.message).toMatch(
      /used 800 tokens and its next model call needs \d+ .*limits\.maxSessionTokens \(1000\)/,
    );
    expect(t.fake!.requests).toHaveLength(1);
  });

  it('refuses the next turn once the session reached it, and says to reset', async () => {
    const app = await appWith({ maxSessionTokens: 1_500 });
    app.fake!.setDefault(() => ({ content: 'ok', usage: usage(700, 100) }));
    const first = await chat(app, 'one');
    const sessionId = first.json().sessionId as string;
    expect((await chat(app, 'two', sessionId)).statusCode).toBe(200);
    const calls = app.fake!.requests.length;
    const third = await chat(app, 'three', sessionId);
    expect(third.statusCode).toBe(429);
    expect(third.json().error.message).toMatch(/limits\.maxSessionTokens \(1500\).*reset/i);
    expect(app.fake!.requests.length).toBe(calls); // no model call was made
    // A reset clears the session's usage, so it runs again.
    await app.app.server.inject({ method: 'POST', url: `/sessions/${sessionId}/reset` });
    expect((await chat(app, 'four', sessionId)).statusCode).toBe(200);
  });

  it('counts the tokens of the session’s compactions', async () => {
    // Room for the summary's claim (its prompt and up to ~4 000 tokens of summary), not for what it used.
    const app = await appWith({ maxSessionTokens: 6_000 });
    app.fake!.setDefault((body) =>
      isSummaryRequest(body)
        ? { content: 'Summary: greetings.', usage: usage(3_000, 2_400) }
        : { content: 'ok', usage: usage(100, 50) },
    );
    const first = await chat(app, 'one');
    const sessionId = first.json().sessionId as string;
    for (const m of ['two', 'three', 'four']) await chat(app, m, sessionId);
    // 600 tokens of chat so far: within the limit without the compaction.
    const compacted = await app.app.server.inject({
      method: 'POST',
      url: `/sessions/${sessionId}/compact`,
    });
    expect(compacted.statusCode, compacted.body).toBe(200);
    const res = await chat(app, 'five', sessionId);
    expect(res.statusCode).toBe(429);
    expect(res.json().error.code).toBe('BUDGET_EXCEEDED');
  });
});

describe('limits.maxSessionTokens and compaction', () => {
  it('refuses a summary whose claim would pass it, before the summary model is asked', async () => {
    const app = await appWith({ maxSessionTokens: 1_000 });
    app.fake!.setDefault((body) =>
      isSummaryRequest(body)
        ? { content: 'Summary: greetings.', usage: usage(300, 200) }
        : { content: 'ok', usage: usage(100, 50) },
    );
    const first = await chat(app, 'one');
    const sessionId = first.json().sessionId as string;
    for (const m of ['two', 'three', 'four']) await chat(app, m, sessionId);
    const res = await app.app.server.inject({
      method: 'POST',
      url: `/sessions/${sessionId}/compact`,
    });
    expect(res.statusCode).toBe(429);
    expect(res.json().error.code).toBe('BUDGET_EXCEEDED');
    expect(res.json().error.message).toMatch(/used 600 tokens.*limits\.maxSessionTokens \(1000\)/);
    expect(app.fake!.requests.filter((r) => isSummaryRequest(r.body))).toEqual([]);
    expect((await app.app.store.findSession(sessionId))?.compact_seq).toBe(0);
  });
});

describe('limits.maxTurnTokens and the automatic compaction of a turn', () => {
  it('refuses a summary whose claim would pass it: the summary model is not asked', async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          ...TEST_AGENT,
          tools: ['current_time'],
          // Compaction on the turn only, and a turn limit below its summary's claim
          // (some 1 000 tokens of transcript plus 2 800 of requested summary).
          defaultCompaction: { autoThreshold: 80, prepareAt: 0 },
          limits: { maxTurnTokens: 3_500 },
        },
      },
      mainModel: { contextWindow: 4_096 },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'Summary.' } : { content: 'ok' },
    );
    // Over the 80 % threshold with the next message: the turn compacts first.
    const history = Array.from({ length: 24 }, (_, i) => ({
      role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
      content: `Message ${i}: ${'lorem ipsum dolor sit amet '.repeat(30)}`,
    }));
    const id = await seedSession(t.app, history);
    const res = await chat(t, 'hello', id);
    expect(res.statusCode).toBe(429);
    expect(res.json().error.message).toMatch(/limits\.maxTurnTokens \(3500\)/);
    // Neither the summary nor the call that would not fit without it was sent.
    expect(t.fake!.requests).toEqual([]);
  });
});

describe('a daemon over its budget', () => {
  it('is skipped after the tick that hit it, and says so once', async () => {
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
        done();
      },
    });
    t = await startTestApp({
      agents: {
        assistant: {
          ...TEST_AGENT,
          tools: ['current_time'],
          limits: { maxToolCalls: 1 },
          daemon: { every: '1h', prompt: 'check' },
        },
      },
      app: { logger: { level: 'warn', stream } },
    });
    t.fake!.setDefault(() => ({ tool_calls: toolCalls(2) }));
    const first = await t.app.daemons.runDaemonTick({ agentName: 'assistant' });
    expect(first?.status).toBe('failed');
    expect(first?.error).toMatch(/^BUDGET_EXCEEDED/);
    const calls = t.fake!.requests.length;
    expect(await t.app.daemons.runDaemonTick({ agentName: 'assistant' })).toBeUndefined();
    expect(await t.app.daemons.runDaemonTick({ agentName: 'assistant' })).toBeUndefined();
    expect(t.fake!.requests.length).toBe(calls);
    expect(lines.filter((l) => l.includes('daemon ticks skipped'))).toHaveLength(1);
  });
});

describe('the limits block in agent.json', () => {
  it('is strict: an unknown limit or a non-positive one is refused with its path', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cairn-limits-'));
    try {
      for (const [name, limits] of [
        ['unknown', { maxTokens: 5 }],
        ['zero', { maxToolCalls: 0 }],
      ] as const) {
        mkdirSync(join(dir, name));
        writeFileSync(
          join(dir, name, 'agent.json'),
          JSON.stringify({ ...TEST_AGENT, name, limits }),
        );
      }
      const { agents, problems } = loadAgents(dir);
      expect(agents).toEqual([]);
      expect(problems.map((p) => p.pointer).sort()).toEqual(['/limits', '/limits/maxToolCalls']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('limits.maxTurnTokens and the retry after an overflow', () => {
  it('holds the call re-sent after its compaction: the summary’s tokens count, and the retry past the limit is not sent', async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          ...TEST_AGENT,
          tools: ['current_time'],
          defaultCompaction: { autoThreshold: 95, prepareAt: 0 },
          limits: { maxTurnTokens: LIMIT },
        },
      },
    });
    let mainCalls = 0;
    t.fake!.setDefault((body) => {
      // The summary fits the turn's limit when asked, and uses nearly all of it.
      if (isSummaryRequest(body)) return { content: 'Summary.', usage: usage(LIMIT - 100, 50) };
      mainCalls += 1;
      return mainCalls === 1 ? OVERFLOW : { content: 'ok' };
    });
    const history = Array.from({ length: 10 }, (_, i) => ({
      role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
      content: `Message ${i}: ${'lorem ipsum dolor sit amet '.repeat(10)}`,
    }));
    const id = await seedSession(t.app, history);
    const res = await chat(t, 'hello', id);
    expect(res.statusCode, res.body).toBe(429);
    expect(res.json().error.message).toMatch(/limits\.maxTurnTokens \(20000\)/);
    // The first call (refused as too long) and the summary were sent; the retry was not.
    expect(mainCalls).toBe(1);
    expect(t.fake!.requests.filter((r) => isSummaryRequest(r.body))).toHaveLength(1);
  });
});
