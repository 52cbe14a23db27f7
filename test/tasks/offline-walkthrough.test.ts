/**
 * The guide's tool, ask_user and approval walkthroughs with the built-in
 * offline model and no provider, through the real HTTP app on SQLite: a chat
 * that calls a tool and replies with its result; a task that waits on
 * ask_user, is answered and completes; a task that waits for approval, is
 * approved, runs the tool once and completes; a denied approval. Every
 * request the offline model got is one the outgoing normaliser leaves as is.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ObservedCall } from '../../src/llm/observed-model.js';
import { normalizeOutgoing } from '../../src/llm/normalize-request.js';
import { OFFLINE_LABEL, OFFLINE_TOOL_NOTE } from '../../src/llm/offline-model.js';
import type { TaskRow } from '../../src/store/store.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const PLANNER = {
  name: 'planner',
  description: 'Plans trips; asks when something is unclear.',
  system: 'You plan trips. Ask the user with ask_user when you need a detail.',
  tools: ['ask_user', 'current_time', { tool: './tools/book-hotel.mjs', approval: 'required' }],
};

/** Counts its runs in a file next to it, so the test sees how often it ran. */
const BOOK_HOTEL = `
import { appendFileSync } from 'node:fs';
export default {
  name: 'book_hotel',
  description: 'Books a hotel room in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  async run({ city }) {
    appendFileSync(new URL('./runs.txt', import.meta.url), city + '\\n');
    return 'Booked a room in ' + city + '.';
  },
};
`;

interface Envelope {
  sessionId: string;
  reply: string;
  messages: { role: string; content: string | null; tool_calls?: unknown[] }[];
  pendingApproval?: { taskId: string; tool: string; arguments: string };
}

describe('the offline model walks through tools, ask_user and approval', () => {
  let t: TestApp;
  const calls: ObservedCall[] = [];

  beforeAll(async () => {
    t = await startTestApp({
      fake: null,
      agents: { planner: PLANNER },
      files: { 'agents/planner/tools/book-hotel.mjs': BOOK_HOTEL },
      app: { observeModelCall: (call) => calls.push(call) },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    calls.length = 0;
  });

  function post(url: string, payload?: Record<string, unknown>) {
    return t.app.server.inject({ method: 'POST', url, ...(payload ? { payload } : {}) });
  }

  /** The cities book_hotel booked so far, one per run. */
  async function runs(): Promise<string[]> {
    const path = join(t.home, 'agents/planner/tools/runs.txt');
    return existsSync(path) ? readFileSync(path, 'utf8').trim().split('\n') : [];
  }

  /** Every chat request the offline model got was already normalised, and offered only the agent's tools. */
  function requestsWereNormalised(): void {
    const chats = calls.filter((c) => c.request.purpose === 'chat');
    expect(chats.length).toBeGreaterThan(0);
    for (const call of chats) {
      expect(call.response?.model).toBe('offline');
      expect(normalizeOutgoing(call.request.messages)).toEqual(call.request.messages);
      const offered = new Set((call.request.tools ?? []).map((tool) => tool.name));
      for (const toolCall of call.response?.message.tool_calls ?? [])
        expect(offered.has(toolCall.function.name)).toBe(true);
    }
  }

  it('a chat calls current_time when told to and replies with its result', async () => {
    const res = await post('/agents/planner/chat', {
      message: 'What time is it? Use the current_time tool.',
    });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json<Envelope>();
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    const result = body.messages[2]!.content!;
    expect(JSON.parse(result)).toMatchObject({ iso: expect.any(String) });
    expect(body.reply).toBe(
      `${OFFLINE_LABEL} I called current_time {}; it returned: ${result}. ${OFFLINE_TOOL_NOTE}`,
    );
    requestsWereNormalised();
  });

  it('a chat without a directive gets the canned reply and no tool call', async () => {
    const res = await post('/agents/planner/chat', { message: 'Plan a three-day trip' });
    const body = res.json<Envelope>();
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(body.reply.startsWith(`${OFFLINE_LABEL} You said:`)).toBe(true);
  });

  it('in a chat, the question it asks is the reply, and the answer is the next message', async () => {
    const res = await post('/agents/planner/chat', { message: '/ask Which city?' });
    const body = res.json<Envelope>();
    expect(body.reply).toBe('Which city?');
    const next = await post('/agents/planner/chat', { message: 'Lyon', sessionId: body.sessionId });
    expect(next.json<Envelope>().reply.startsWith(`${OFFLINE_LABEL} You said: "Lyon"`)).toBe(true);
    requestsWereNormalised();
  });

  it('a task waits on ask_user, is answered, and completes with the answer', async () => {
    const started = await post('/agents/planner/tasks?wait=true', {
      input: 'Plan a three-day trip. Ask me which city the trip should start from.',
    });
    expect(started.statusCode, started.body).toBe(201);
    const waiting = started.json<{ task: TaskRow }>().task;
    expect(waiting).toMatchObject({
      status: 'waiting',
      question: 'Which city the trip should start from?',
    });
    expect(waiting.pending_call_id).toMatch(/^call_[0-9a-f]{24}$/);

    const resumed = await post(`/tasks/${waiting.id}/resume?wait=true`, { answer: 'Lyon' });
    expect(resumed.statusCode, resumed.body).toBe(200);
    const task = resumed.json<{ task: TaskRow }>().task;
    expect(task.status).toBe('completed');
    expect(task.result).toBe(
      `${OFFLINE_LABEL} I called ask_user {"question":"Which city the trip should start from?"}; it returned: Lyon. ${OFFLINE_TOOL_NOTE}`,
    );
    requestsWereNormalised();
  });

  it('a task waits for approval, is approved, runs the tool once, then a denied call is not run', async () => {
    const before = (await runs()).length;
    const started = await post('/agents/planner/tasks?wait=true', {
      input:
        'Book hotels in Lyon and in Annecy.\n/tool book_hotel city=Lyon\n/tool book_hotel city=Annecy',
    });
    expect(started.statusCode, started.body).toBe(201);
    const first = started.json<{ task: TaskRow & { pending_tool: string | null } }>().task;
    expect(first).toMatchObject({
      status: 'waiting',
      pending_tool: 'book_hotel',
      pending_arguments: '{"city":"Lyon"}',
    });
    expect(await runs()).toHaveLength(before);

    const approved = await post(`/tasks/${first.id}/approve?wait=true`);
    expect(approved.statusCode, approved.body).toBe(200);
    const second = approved.json<{ task: TaskRow & { pending_tool: string | null } }>().task;
    expect(second).toMatchObject({
      status: 'waiting',
      pending_tool: 'book_hotel',
      pending_arguments: '{"city":"Annecy"}',
    });
    expect((await runs()).slice(before)).toEqual(['Lyon']);

    const denied = await post(`/tasks/${first.id}/deny?wait=true`, { reason: 'not this month' });
    expect(denied.statusCode, denied.body).toBe(200);
    const done = denied.json<{ task: TaskRow }>().task;
    expect(done.status).toBe('completed');
    expect(done.result).toContain(
      `${OFFLINE_LABEL} I called book_hotel {"city":"Lyon"}; it returned: Booked a room in Lyon.`,
    );
    expect(done.result).toContain(
      'I called book_hotel {"city":"Annecy"}; it returned: A person denied',
    );
    expect(done.result).toContain('not this month');
    expect((await runs()).slice(before)).toEqual(['Lyon']);
    requestsWereNormalised();
  });

  it('a chat that needs approval becomes a waiting task; approving it completes the task', async () => {
    const before = (await runs()).length;
    const res = await post('/agents/planner/chat', { message: '/tool book_hotel city=Annecy' });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json<Envelope>();
    expect(body.pendingApproval).toMatchObject({
      tool: 'book_hotel',
      arguments: '{"city":"Annecy"}',
    });
    const approved = await post(`/tasks/${body.pendingApproval!.taskId}/approve?wait=true`);
    const task = approved.json<{ task: TaskRow }>().task;
    expect(task.status).toBe('completed');
    expect(task.result).toContain('it returned: Booked a room in Annecy.');
    expect((await runs()).slice(before)).toEqual(['Annecy']);
  });

  it('never calls a tool the agent does not offer, and says which one it would need', async () => {
    const res = await post('/agents/planner/chat', { message: '/tool send_money amount=5' });
    const body = res.json<Envelope>();
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
    expect(body.reply).toContain(
      'I would need the tool "send_money", which this request does not offer (tools offered: ',
    );
    requestsWereNormalised();
  });
});
