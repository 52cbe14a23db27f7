/**
 * GET /metrics: Prometheus text with the `cairn_` metrics,
 * moved by real chats, tasks and compactions against the fake model; behind
 * the API key.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CairnMetrics, labelValue, MAX_LABEL_CHARS } from '../../src/metrics/metrics.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { seedSession, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

/** A tool that needs a person's yes before each call. */
const TOUCH_TOOL = `export default {
  name: 'touch',
  description: 'Touches a file.',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() { return 'touched'; },
};
`;
const GUARDED = {
  name: 'guarded',
  system: 'You touch files when asked.',
  tools: [{ tool: './tools/touch.js', approval: 'required' }],
};

/** The value of one sample line, e.g. `cairn_turns_total{agent="assistant",…}`; 0 if absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
      return Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return 0;
}

describe('GET /metrics', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      // Scripted replies go to requests in arrival order: a summary prepared
      // off a turn (after the long 520-call turn) would take the next test's.
      agents: {
        assistant: { ...TEST_AGENT, defaultCompaction: { prepareAt: 0 } },
        guarded: GUARDED,
      },
      files: { 'agents/guarded/tools/touch.js': TOUCH_TOOL },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body)
        ? { content: 'A summary.', usage: { prompt_tokens: 40, completion_tokens: 8 } }
        : { content: 'ok', usage: { prompt_tokens: 100, completion_tokens: 7 } },
    );
  });
  afterAll(() => t.close());

  const scrape = async (): Promise<string> => {
    const res = await t.app.server.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toContain('text/plain');
    return res.body;
  };

  it('counts chat turns, model calls, tokens by role, tasks and compactions', async () => {
    const before = await scrape();
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hello' },
    });
    expect(chat.statusCode).toBe(200);
    const bad = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: '  ' },
    });
    expect(bad.statusCode).toBe(400);
    const task = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks?wait=true',
      payload: { input: 'do it' },
    });
    expect(task.statusCode).toBe(201);
    const id = await seedSession(t.app, [
      { role: 'user', content: 'one two three four five' },
      { role: 'assistant', content: 'six seven eight nine ten' },
      { role: 'user', content: 'eleven twelve' },
      { role: 'assistant', content: 'thirteen' },
    ]);
    expect(
      (await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` })).statusCode,
    ).toBe(200);

    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) =>
      sample(after, name, labels) - sample(before, name, labels);
    expect(delta('cairn_turns_total', { agent: 'assistant', mode: 'chat', outcome: 'ok' })).toBe(1);
    expect(delta('cairn_turns_total', { agent: 'assistant', mode: 'chat', outcome: 'error' })).toBe(
      1,
    );
    expect(
      delta('cairn_turns_total', { agent: 'assistant', mode: 'task', outcome: 'completed' }),
    ).toBe(1);
    expect(delta('cairn_turn_duration_seconds_count', { agent: 'assistant', mode: 'chat' })).toBe(
      2,
    );
    expect(delta('cairn_model_calls_total', { role: 'main', purpose: 'chat', outcome: 'ok' })).toBe(
      2,
    );
    expect(
      delta('cairn_model_calls_total', { role: 'main', purpose: 'summary', outcome: 'ok' }),
    ).toBe(1);
    expect(
      delta('cairn_model_call_duration_seconds_count', { role: 'main', purpose: 'chat' }),
    ).toBe(2);
    expect(delta('cairn_model_tokens_total', { role: 'main', direction: 'in' })).toBe(240);
    expect(delta('cairn_model_tokens_total', { role: 'main', direction: 'out' })).toBe(22);
    expect(delta('cairn_compactions_total', { trigger: 'manual', outcome: 'ok' })).toBe(1);
    expect(delta('cairn_task_transitions_total', { state: 'started' })).toBe(1);
    expect(delta('cairn_task_transitions_total', { state: 'completed' })).toBe(1);
    for (const gauge of ['cairn_queue_depth', 'cairn_event_streams_open', 'cairn_tasks_running'])
      expect(after).toMatch(new RegExp(`^${gauge} 0$`, 'm'));
    // The process's memory, so a leak shows on a dashboard.
    for (const gauge of ['cairn_process_heap_used_bytes', 'cairn_process_rss_bytes'])
      expect(Number(new RegExp(`^${gauge} (\\d+)$`, 'm').exec(after)?.[1])).toBeGreaterThan(0);
  });

  it('counts tool calls by tool and outcome', async () => {
    const before = await scrape();
    t.fake!.script(
      {
        tool_calls: [
          { name: 'current_time', arguments: '{}' },
          { name: 'no_such_tool', arguments: '{}' },
        ],
      },
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is late.' },
    );
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'what time is it?' },
    });
    expect(res.statusCode).toBe(200);
    const after = await scrape();
    const delta = (labels: Record<string, string>) =>
      sample(after, 'cairn_tool_calls_total', labels) -
      sample(before, 'cairn_tool_calls_total', labels);
    expect(delta({ tool: 'current_time', outcome: 'ok' })).toBe(2);
    // A name the agent does not offer is counted as `unknown`, never as itself.
    expect(delta({ tool: 'unknown', outcome: 'error' })).toBe(1);
    expect(after).not.toContain('no_such_tool');
    expect(delta({ tool: 'current_time', outcome: 'error' })).toBe(0);
  });

  it('creates no new series when the model invents 520 tool names', async () => {
    const series = (text: string) =>
      text.split('\n').filter((line) => line.startsWith('cairn_tool_calls_total{'));
    // `unknown` exists once any invented call was counted; make sure it does.
    t.fake!.script(
      { tool_calls: [{ name: 'warm_up_invention', arguments: '{}' }] },
      { content: 'ok' },
    );
    await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'warm up' },
    });
    const before = await scrape();
    const invented = Array.from({ length: 520 }, (_, i) => ({
      name: `invented_${i}_${'x'.repeat(80)}`,
      arguments: '{}',
    }));
    t.fake!.script({ tool_calls: invented }, { content: 'Never mind.' });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'use every tool you can think of' },
    });
    expect(res.statusCode, res.body).toBe(200);
    const after = await scrape();
    expect(series(after)).toHaveLength(series(before).length);
    expect(after).not.toContain('invented_');
    expect(
      sample(after, 'cairn_tool_calls_total', { tool: 'unknown', outcome: 'error' }) -
        sample(before, 'cairn_tool_calls_total', { tool: 'unknown', outcome: 'error' }),
    ).toBe(520);
  });

  it('counts a call run after its approval', async () => {
    const before = await scrape();
    t.fake!.script({ tool_calls: [{ name: 'touch', arguments: '{}' }] }, { content: 'Done.' });
    const started = await t.app.server.inject({
      method: 'POST',
      url: '/agents/guarded/tasks?wait=true',
      payload: { input: 'touch it' },
    });
    const task = started.json<{ task: { id: string; status: string; pending_tool: string } }>()
      .task;
    expect([task.status, task.pending_tool]).toEqual(['waiting', 'touch']);
    const waiting = await scrape();
    const labels = { tool: 'touch', outcome: 'ok' };
    // Waiting for the yes, the call has not run: nothing counted yet.
    expect(sample(waiting, 'cairn_tool_calls_total', labels)).toBe(
      sample(before, 'cairn_tool_calls_total', labels),
    );
    const approved = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/approve?wait=true`,
    });
    expect(approved.json<{ task: { status: string } }>().task.status).toBe('completed');
    const after = await scrape();
    expect(sample(after, 'cairn_tool_calls_total', labels)).toBe(
      sample(before, 'cairn_tool_calls_total', labels) + 1,
    );
  });

  it('counts a streamed chat that fails after its 200 as an error turn', async () => {
    const before = await scrape();
    t.fake!.script({ status: 400 });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'fail while streaming', stream: true },
    });
    expect(res.statusCode).toBe(200);
    expect(res.body).toContain('event: error');
    const after = await scrape();
    const turns = (outcome: string) =>
      sample(after, 'cairn_turns_total', { agent: 'assistant', mode: 'chat', outcome }) -
      sample(before, 'cairn_turns_total', { agent: 'assistant', mode: 'chat', outcome });
    expect([turns('ok'), turns('error')]).toEqual([0, 1]);
  });

  it('gauges open event streams, running tasks and queued turns while they last', async () => {
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    const { port } = t.app.server.server.address() as { port: number };
    const gauge = async (name: string): Promise<number> => sample(await scrape(), name);

    const stream = new AbortController();
    const events = await fetch(`http://127.0.0.1:${port}/events`, { signal: stream.signal });
    expect(events.status).toBe(200);
    await expect.poll(() => gauge('cairn_event_streams_open')).toBe(1);

    // A task whose model call never answers stays running, holding its session's queue slot.
    t.fake!.script({ hang: true });
    const started = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/tasks',
      payload: { input: 'take your time' },
    });
    const taskId = started.json<{ task: { id: string } }>().task.id;
    await expect.poll(() => gauge('cairn_tasks_running')).toBe(1);
    expect(await gauge('cairn_queue_depth')).toBe(1);

    const cancelled = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${taskId}/cancel`,
    });
    expect(cancelled.json<{ task: { status: string } }>().task.status).toBe('cancelled');
    stream.abort();
    await expect.poll(() => gauge('cairn_tasks_running')).toBe(0);
    await expect.poll(() => gauge('cairn_queue_depth')).toBe(0);
    await expect.poll(() => gauge('cairn_event_streams_open')).toBe(0);
  });

  it('counts turns run through the OpenAI-compatible API, by agent and outcome', async () => {
    const before = await scrape();
    const completion = await t.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { model: 'assistant', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(completion.statusCode).toBe(200);
    t.fake!.script({ status: 400 });
    const streamed = await t.app.server.inject({
      method: 'POST',
      url: '/v1/responses',
      payload: { model: 'assistant', input: 'fail while streaming', stream: true },
    });
    expect(streamed.statusCode).toBe(200);
    const unknown = await t.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      payload: { model: 'made-up-name', messages: [{ role: 'user', content: 'hi' }] },
    });
    expect(unknown.statusCode).toBe(404);
    const after = await scrape();
    const turns = (agent: string, outcome: string) =>
      sample(after, 'cairn_turns_total', { agent, mode: 'chat', outcome }) -
      sample(before, 'cairn_turns_total', { agent, mode: 'chat', outcome });
    expect([turns('assistant', 'ok'), turns('assistant', 'error')]).toEqual([1, 1]);
    // A name that is no loaded agent is not a series of its own.
    expect(turns('unknown', 'error')).toBe(1);
    expect(after).not.toContain('made-up-name');
  });

  it('counts a failed model call as an error', async () => {
    const before = await scrape();
    t.fake!.script({ status: 400 });
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'fail please' },
    });
    expect(res.statusCode).toBeGreaterThanOrEqual(400);
    const after = await scrape();
    const labels = { role: 'main', purpose: 'chat', outcome: 'error' };
    expect(sample(after, 'cairn_model_calls_total', labels)).toBe(
      sample(before, 'cairn_model_calls_total', labels) + 1,
    );
  });

  it('is behind the API key', async () => {
    const locked = await startTestApp({ fake: null, env: { CAIRN_API_KEY: 'k'.repeat(32) } });
    try {
      expect((await locked.app.server.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(
        401,
      );
    } finally {
      await locked.close();
    }
  });
});

describe('metric label values', () => {
  it('are cut to 64 characters', async () => {
    const metrics = new CairnMetrics({ queueDepth: () => 0, openEventStreams: () => 0 });
    const long = `mcp_${'y'.repeat(200)}`;
    metrics.toolCall(long, false);
    const text = await metrics.registry.metrics();
    expect(text).toContain(`tool="${long.slice(0, MAX_LABEL_CHARS)}"`);
    expect(text).not.toContain(long.slice(0, MAX_LABEL_CHARS + 1));
    expect(labelValue('short')).toBe('short');
  });
});
