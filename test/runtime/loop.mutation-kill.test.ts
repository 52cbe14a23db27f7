/**
 * The loop on its own, against the scripted fake provider through the real
 * OpenAI adapter: what each request carries, what is persisted (and with
 * which usage), the order calls of one reply run in, where the loop stops
 * (answer, a question, a call for approval, calls answered from outside, a
 * budget, too many broken replies or iterations, a cancel), and how one tool
 * call's result, failure, timeout and cancellation are told to the model.
 * The turn is a recording implementation of the loop's `LoopTurn` seam.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRoleSettings } from '../../src/config/settings.js';
import type { ChatMessage, TokenUsage, ToolCall } from '../../src/llm/messages.js';
import {
  decorateModel,
  type ModelCallOptions,
  type ModelClient,
  type ModelRequest,
  type ModelResponse,
} from '../../src/llm/model-client.js';
import { EMPTY_TOOL_RESULT } from '../../src/llm/normalize-request.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import {
  callUsageOf,
  CANCELLED_TOOL_RESULT,
  EMPTY_REPLY_NUDGE,
  NOT_RUN_TOOL_RESULT,
  OVER_BUDGET_TOOL_RESULT,
  runApprovedToolCall,
  runLoop,
  TRUNCATED_TOOL_CALL_NOTE,
  type LoopEvent,
  type LoopOptions,
  type LoopTurn,
} from '../../src/runtime/loop.js';
import { TurnBudget } from '../../src/runtime/turn-budget.js';
import type { Tool } from '../../src/tools/tool.js';
import { outsideAnswer, waitForUser } from '../../src/tools/tool.js';
import { ToolSet } from '../../src/tools/tool-set.js';
import type { MemoryStore } from '../../src/store/store.js';
import type { FakeLlmServer, FakeReply } from '../fakes/llm-server.js';
import { startFakeLlmServer } from '../fakes/llm-server.js';

const SESSION_ID = 'sess_loop';

// ---- tools ------------------------------------------------------------------------

const echo: Tool = {
  name: 'echo',
  description: 'Returns its text argument',
  parameters: {
    type: 'object',
    properties: { text: { type: 'string' }, suffix: { type: 'string', default: '' } },
    required: ['text'],
    additionalProperties: false,
  },
  run: (args) => Promise.resolve(`${String(args['text'])}${String(args['suffix'])}`),
};

const boom: Tool = {
  name: 'boom',
  description: 'Always throws',
  parameters: { type: 'object', properties: {} },
  run: () => Promise.reject(new Error('disk on fire')),
};

const askUser: Tool = {
  name: 'ask_user',
  description: 'Asks the user',
  parameters: {
    type: 'object',
    properties: { question: { type: 'string' } },
    required: ['question'],
  },
  run: (args) => Promise.resolve(waitForUser(String(args['question']))),
};

const deploy: Tool = {
  name: 'deploy',
  description: 'Needs a person first',
  parameters: {
    type: 'object',
    properties: { target: { type: 'string' } },
    required: ['target'],
  },
  approval: 'required',
  approvalTimeout: '30m',
  run: () => Promise.resolve('deployed'),
};

const clientTool: Tool = {
  name: 'client_lookup',
  description: 'Answered by the API client',
  parameters: { type: 'object', properties: {} },
  run: () => Promise.resolve(outsideAnswer()),
};

/** Returns a value of the kind its argument names, for how results become text. */
const shaped: Tool = {
  name: 'shaped',
  description: 'Returns a value of a given kind',
  parameters: { type: 'object', properties: { kind: { type: 'string' } }, required: ['kind'] },
  run: (args) => {
    const circular: Record<string, unknown> = {};
    circular['self'] = circular;
    const values: Record<string, unknown> = {
      undefined: undefined,
      null: null,
      object: { a: 1 },
      zero: 0,
      spaced: '  padded  ',
      blank: '   ',
      circular,
    };
    return Promise.resolve(values[String(args['kind'])]);
  },
};

const TOOLS = new ToolSet([echo, boom, askUser, deploy, clientTool]);

const toolContext: LoopOptions['toolContext'] = {
  sessionId: SESSION_ID,
  agentName: 'assistant',
  history: { searchHistory: () => Promise.resolve([]) },
  // No tool here keeps notes.
  memory: {} as MemoryStore,
  depth: 0,
  lineage: ['assistant'],
  budget: { subagentsLeft: 0 },
};

function call(id: string, name: string, args: object | string = {}): ToolCall {
  return {
    id,
    type: 'function',
    function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) },
  };
}

const fakeCall = (c: ToolCall) => ({
  id: c.id,
  name: c.function.name,
  arguments: c.function.arguments,
});

// ---- the model and the turn ----------------------------------------------------------

let fake: FakeLlmServer;
let provider: OpenAIModel;
/** Every request and its options as the loop handed them to the model. */
let sent: { request: ModelRequest; options: ModelCallOptions }[];

beforeAll(async () => {
  fake = await startFakeLlmServer();
  const role: ModelRoleSettings = {
    provider: 'openai',
    baseURL: fake.baseURL,
    model: 'role-model',
    apiKeyEnv: 'X',
    apiKey: 'sk-test',
    contextWindow: 100_000,
    // Longer than any test: a call that is not cancelled with the turn fails as a timeout.
    timeoutMs: 20_000,
    maxRetries: 0,
    profile: 'openai',
  };
  provider = new OpenAIModel({ role });
});
afterEach(() => fake.reset());
afterAll(async () => fake.close());

/** The provider, with what the loop passes noted, and its responses edited as a decorator (the call recorder) may. */
function model(edit: (response: ModelResponse) => ModelResponse = (r) => r): ModelClient {
  sent = [];
  return decorateModel(provider, async (request, options) => {
    sent.push({ request, options: options ?? {} });
    return edit(await provider.complete(request, options));
  });
}

interface Persisted {
  messages: ChatMessage[];
  usage?: TokenUsage;
  promptTokens?: number;
}

/** A turn that keeps what the loop persists and hands its messages on. */
function recordingTurn(extra: Partial<LoopTurn> = {}): LoopTurn & {
  persisted: Persisted[];
  prepared: ChatMessage[][];
} {
  const persisted: Persisted[] = [];
  const prepared: ChatMessage[][] = [];
  return {
    persisted,
    prepared,
    prepare: (messages) => {
      prepared.push(messages);
      return Promise.resolve(messages);
    },
    persist: (messages, usage, promptTokens) => {
      persisted.push({
        messages,
        ...(usage ? { usage } : {}),
        ...(promptTokens !== undefined ? { promptTokens } : {}),
      });
      return Promise.resolve();
    },
    ...extra,
  };
}

const START: ChatMessage[] = [
  { role: 'system', content: 'You are a test assistant.' },
  { role: 'user', content: 'hi' },
];

function loop(overrides: Partial<LoopOptions> = {}): Promise<Awaited<ReturnType<typeof runLoop>>> {
  return runLoop({
    model: model(),
    messages: START,
    tools: TOOLS,
    maxIterations: 6,
    turn: recordingTurn(),
    toolContext,
    ...overrides,
  });
}

/** The persisted tool results as `id:content`. */
function results(turn: { persisted: Persisted[] }): string[] {
  return turn.persisted
    .flatMap((p) => p.messages)
    .filter((m) => m.role === 'tool')
    .map((m) => `${m.tool_call_id ?? ''}:${m.content ?? ''}`);
}

/** The messages of the fake's `n`th request, as `role:content`. */
function requestLines(n: number): string[] {
  const body = fake.requests[n]!.body as { messages: { role: string; content: string | null }[] };
  return body.messages.map((m) => `${m.role}:${m.content ?? ''}`);
}

// ---- tests ---------------------------------------------------------------------------

describe('loop: the request', () => {
  it('sends the messages, tools, model, temperature and cache key; persists the answer with its usage', async () => {
    fake.script({ content: 'hello back', usage: { prompt_tokens: 11, completion_tokens: 4 } });
    const turn = recordingTurn();

    const result = await loop({
      turn,
      maxIterations: 1,
      modelName: 'agent-model',
      temperature: 0.3,
    });

    expect(result).toEqual({
      kind: 'answer',
      reply: 'hello back',
      usage: { input_tokens: 11, output_tokens: 4 },
    });
    const body = fake.requests[0]!.body as Record<string, unknown>;
    expect(body).toMatchObject({
      model: 'agent-model',
      temperature: 0.3,
      prompt_cache_key: SESSION_ID,
    });
    expect((body['tools'] as { function: { name: string } }[]).map((t) => t.function.name)).toEqual(
      TOOLS.names(),
    );
    expect(requestLines(0)).toEqual(['system:You are a test assistant.', 'user:hi']);
    expect(sent[0]!.request.purpose).toBe('chat');
    expect(turn.persisted).toEqual([
      {
        messages: [{ role: 'assistant', content: 'hello back' }],
        usage: { input_tokens: 11, output_tokens: 4 },
        promptTokens: 11,
      },
    ]);
  });

  it('sends no tools when the agent has none, and the role’s model when the agent names none', async () => {
    fake.script({ content: 'plain' });

    await loop({ tools: new ToolSet([]) });

    const body = fake.requests[0]!.body as Record<string, unknown>;
    expect(body['tools']).toBeUndefined();
    expect(body['model']).toBe('role-model');
    expect(body['temperature']).toBeUndefined();
    // Nor at the model seam, where another provider's adapter reads them.
    expect(Object.keys(sent[0]!.request).sort()).toEqual(['messages', 'promptCacheKey', 'purpose']);
    // No signal, scope or stream asked for: none is passed on.
    expect(Object.keys(sent[0]!.options)).toEqual([]);
  });

  it('sends what prepare returned, and gives prepare the messages of the turn so far', async () => {
    fake.script(
      { tool_calls: [fakeCall(call('c1', 'echo', { text: 'ping' }))] },
      { content: 'done' },
    );
    const turn = recordingTurn({
      prepare: (messages) => {
        turn.prepared.push(messages);
        return Promise.resolve([
          ...messages,
          { role: 'user', content: `call ${turn.prepared.length}` },
        ]);
      },
    });

    await loop({ turn });

    expect(requestLines(0)).toEqual(['system:You are a test assistant.', 'user:hi', 'user:call 1']);
    expect(requestLines(1)).toEqual([
      'system:You are a test assistant.',
      'user:hi',
      'user:call 1',
      'assistant:',
      'tool:ping',
      'user:call 2',
    ]);
    expect(turn.prepared[1]!.at(-1)).toMatchObject({ role: 'tool', content: 'ping' });
  });

  it('names the recalled seqs of the call, and none when the turn recalled nothing', async () => {
    const recalled: (readonly number[] | undefined)[] = [[4, 9], [], undefined];
    fake.script(
      { tool_calls: [fakeCall(call('r1', 'echo', { text: 'x' }))] },
      { tool_calls: [fakeCall(call('r2', 'echo', { text: 'x' }))] },
      { content: 'done' },
    );
    const turn = recordingTurn({ recalledSeqs: () => recalled.shift() });

    await loop({ turn });

    expect(sent.map((s) => s.request.recalledSeqs)).toEqual([[4, 9], undefined, undefined]);
  });

  it('passes the signal and the scope with each call', async () => {
    fake.script({ content: 'ok' });
    const controller = new AbortController();
    const scope = { sessionId: SESSION_ID, agentName: 'assistant' };

    await loop({ signal: controller.signal, scope });

    expect(sent[0]!.options.signal).toBe(controller.signal);
    expect(sent[0]!.options.scope).toBe(scope);
    expect(sent[0]!.options.onDelta).toBeUndefined();
  });

  it('streams the text as delta events only when asked to', async () => {
    fake.script({ content: 'one two three' }, { content: 'four five six' });
    const events: LoopEvent[] = [];

    const streamed = await loop({ stream: true, onEvent: (e) => events.push(e) });
    expect(streamed).toMatchObject({ kind: 'answer', reply: 'one two three' });
    const deltas = events.filter((e) => e.type === 'delta');
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.map((e) => (e.type === 'delta' ? e.text : '')).join('')).toBe('one two three');

    events.length = 0;
    await loop({ stream: false, onEvent: (e) => events.push(e) });
    expect(events).toEqual([]);
  });

  it('streams without anyone listening', async () => {
    fake.script({ content: 'nobody hears this' });

    expect(await loop({ stream: true })).toMatchObject({ reply: 'nobody hears this' });
  });
});

describe('loop: usage', () => {
  it('sums the calls’ usage, cache reads and writes and cost, and stores each call’s own', async () => {
    fake.script(
      {
        tool_calls: [fakeCall(call('u1', 'echo', { text: 'ping' }))],
        usage: { prompt_tokens: 10, completion_tokens: 2 },
      },
      {
        tool_calls: [fakeCall(call('u2', 'echo', { text: 'pong' }))],
        usage: {
          prompt_tokens: 20,
          completion_tokens: 3,
          prompt_tokens_details: { cached_tokens: 5 },
        },
      },
      {
        content: 'done',
        usage: {
          prompt_tokens: 30,
          completion_tokens: 4,
          prompt_tokens_details: { cached_tokens: 6 },
        },
      },
    );
    // Cost and cache writes as a priced role and a provider that reports writes give them,
    // from the second call on.
    let n = 0;
    const priced = model((response) => {
      n += 1;
      if (n === 1) return response;
      return {
        ...response,
        usage: { ...response.usage!, cache_write_tokens: n },
        cost: n / 4,
      };
    });
    const turn = recordingTurn();

    const result = await loop({ model: priced, turn });

    expect(result.usage).toEqual({
      input_tokens: 60,
      output_tokens: 9,
      cache_read_tokens: 11,
      cache_write_tokens: 5,
      cost: 1.25,
    });
    const assistants = turn.persisted.filter((p) => p.messages[0]!.role === 'assistant');
    expect(assistants.map((p) => [p.usage, p.promptTokens])).toEqual([
      [{ input_tokens: 10, output_tokens: 2 }, 10],
      [
        {
          input_tokens: 20,
          output_tokens: 3,
          cache_read_tokens: 5,
          cache_write_tokens: 2,
          cost: 0.5,
        },
        20,
      ],
      [
        {
          input_tokens: 30,
          output_tokens: 4,
          cache_read_tokens: 6,
          cache_write_tokens: 3,
          cost: 0.75,
        },
        30,
      ],
    ]);
    // The results carry no usage: only a model call has one.
    expect(
      turn.persisted.filter((p) => p.usage === undefined).map((p) => p.messages[0]!.role),
    ).toEqual(['tool', 'tool']);
  });

  it('stores a call with no usage reported as zero tokens and no prompt count', async () => {
    fake.script({ content: 'no usage here' });
    const turn = recordingTurn();

    const result = await loop({ model: model((r) => ({ ...r, usage: null })), turn });

    expect(result.usage).toEqual({ input_tokens: 0, output_tokens: 0 });
    expect(turn.persisted).toEqual([
      {
        messages: [{ role: 'assistant', content: 'no usage here' }],
        usage: { input_tokens: 0, output_tokens: 0 },
      },
    ]);
  });

  it('callUsageOf keeps cache counts and cost only when they are reported', () => {
    const message: ChatMessage = { role: 'assistant', content: 'x' };
    const base = { message, finishReason: 'stop', model: 'm' };
    expect(callUsageOf({ ...base, usage: null })).toEqual({ input_tokens: 0, output_tokens: 0 });
    expect(callUsageOf({ ...base, usage: null, cost: null })).not.toHaveProperty('cost');
    expect(
      callUsageOf({
        ...base,
        usage: {
          prompt_tokens: 5,
          completion_tokens: 1,
          cache_read_tokens: 0,
          cache_write_tokens: 0,
        },
        cost: 0,
      }),
    ).toEqual({
      input_tokens: 5,
      output_tokens: 1,
      cache_read_tokens: 0,
      cache_write_tokens: 0,
      cost: 0,
    });
    const plain = callUsageOf({ ...base, usage: { prompt_tokens: 5, completion_tokens: 1 } });
    expect(Object.keys(plain)).toEqual(['input_tokens', 'output_tokens']);
  });
});

describe('loop: tool calls and their results', () => {
  it('runs a call, stores the reply with its text and the result, and tells the stream', async () => {
    fake.script(
      { content: 'Let me check.', tool_calls: [fakeCall(call('t1', 'echo', { text: 'ping' }))] },
      { tool_calls: [fakeCall(call('t2', 'boom'))] },
      { content: 'done' },
    );
    const turn = recordingTurn();
    const events: LoopEvent[] = [];

    const result = await loop({ turn, onEvent: (e) => events.push(e) });

    expect(result).toMatchObject({ kind: 'answer', reply: 'done' });
    expect(turn.persisted.map((p) => p.messages)).toEqual([
      [
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [call('t1', 'echo', { text: 'ping' })],
        },
      ],
      [{ role: 'tool', tool_call_id: 't1', name: 'echo', content: 'ping' }],
      [{ role: 'assistant', content: null, tool_calls: [call('t2', 'boom')] }],
      [
        {
          role: 'tool',
          tool_call_id: 't2',
          name: 'boom',
          content: 'Error: the tool "boom" failed: disk on fire',
        },
      ],
      [{ role: 'assistant', content: 'done' }],
    ]);
    expect(events).toEqual([
      { type: 'tool_call', call: call('t1', 'echo', { text: 'ping' }) },
      { type: 'tool_result', callId: 't1', name: 'echo', content: 'ping', isError: false },
      { type: 'tool_call', call: call('t2', 'boom') },
      {
        type: 'tool_result',
        callId: 't2',
        name: 'boom',
        content: 'Error: the tool "boom" failed: disk on fire',
        isError: true,
      },
    ]);
  });

  it('stores an assistant reply of blank text and calls with no content', async () => {
    fake.script(
      { content: '   ', tool_calls: [fakeCall(call('b1', 'echo', { text: 'x' }))] },
      { content: 'ok' },
    );
    const turn = recordingTurn();

    await loop({ turn });

    expect(turn.persisted[0]!.messages[0]).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [call('b1', 'echo', { text: 'x' })],
    });
  });

  it('runs plain calls first, stops at the one that needs approval, and answers the rest "not run"', async () => {
    const ask = call('o1', 'ask_user', { question: 'Which?' });
    const approve = call('o2', 'deploy', { target: 'prod' });
    const plain = call('o3', 'echo', { text: 'first' });
    fake.script({ tool_calls: [ask, approve, plain].map(fakeCall) });
    const turn = recordingTurn();
    const events: LoopEvent[] = [];

    const result = await loop({ turn, onEvent: (e) => events.push(e) });

    expect(result).toEqual({
      kind: 'pending',
      reason: 'approval',
      call: approve,
      usage: expect.any(Object),
      approvalTimeout: '30m',
    });
    expect(results(turn)).toEqual(['o3:first', `o1:${NOT_RUN_TOOL_RESULT}`]);
    expect(results(turn)[1]).toMatch(/waiting for a person/);
    expect(events.filter((e) => e.type === 'tool_call').map((e) => e.call.id)).toEqual([
      'o3',
      'o2',
    ]);
  });

  it('asks the user last, after the other calls of the reply ran', async () => {
    const ask = call('a1', 'ask_user', { question: 'Which city?' });
    const plain = call('a2', 'echo', { text: 'looked up' });
    fake.script({
      tool_calls: [ask, plain].map(fakeCall),
      usage: { prompt_tokens: 3, completion_tokens: 1 },
    });
    const turn = recordingTurn();

    const result = await loop({ turn });

    expect(result).toEqual({
      kind: 'waiting',
      question: 'Which city?',
      callId: 'a1',
      usage: { input_tokens: 3, output_tokens: 1 },
    });
    expect(results(turn)).toEqual(['a2:looked up']);
  });

  it('stops with nothing else to answer when the call for approval is the last', async () => {
    const plain = call('p1', 'echo', { text: 'x' });
    const approve = call('p2', 'deploy', { target: 'prod' });
    fake.script({ tool_calls: [approve, plain].map(fakeCall) });
    const noTimeout = new ToolSet([echo, { ...deploy, approvalTimeout: undefined }]);
    const turn = recordingTurn();

    const result = await loop({ turn, tools: noTimeout });

    expect(result).toMatchObject({ kind: 'pending', call: approve });
    expect(result).not.toHaveProperty('approvalTimeout');
    // One reply and one result: no empty write for the calls after it.
    expect(turn.persisted.map((p) => p.messages.length)).toEqual([1, 1]);
  });

  it('answers a call to an unknown tool among valid ones, and runs the valid ones', async () => {
    const calls = [call('g1', 'ghost'), call('g2', 'echo', { text: 'real' })];
    fake.script({ tool_calls: calls.map(fakeCall) }, { content: 'ok' });
    const turn = recordingTurn();

    expect(await loop({ turn })).toMatchObject({ kind: 'answer', reply: 'ok' });
    expect(results(turn)).toEqual([
      expect.stringMatching(/^g1:Error: there is no tool named "ghost"/),
      'g2:real',
    ]);
  });

  it('lets a call for approval with invalid arguments fail like any invalid call', async () => {
    fake.script(
      { tool_calls: [fakeCall(call('i1', 'deploy', { place: 'prod' }))] },
      { content: 'sorry' },
    );
    const turn = recordingTurn();

    const result = await loop({ turn });

    expect(result).toMatchObject({ kind: 'answer', reply: 'sorry' });
    expect(results(turn)).toEqual([expect.stringMatching(/^i1:Error: The arguments do not match/)]);
  });

  it('stops with the calls an API client answers once the others ran; a later call for approval answers them "not run"', async () => {
    const outside = call('x1', 'client_lookup');
    const plain = call('x2', 'echo', { text: 'ours' });
    fake.script({ content: 'Working on it.', tool_calls: [outside, plain].map(fakeCall) });
    const turn = recordingTurn();

    const result = await loop({ turn });

    expect(result).toEqual({
      kind: 'outside',
      reply: 'Working on it.',
      calls: [outside],
      usage: expect.any(Object),
    });
    expect(results(turn)).toEqual(['x2:ours']);

    fake.script({
      tool_calls: [call('y1', 'client_lookup'), call('y2', 'deploy', { target: 'a' })].map(
        fakeCall,
      ),
    });
    const second = recordingTurn();
    expect(await loop({ turn: second })).toMatchObject({ kind: 'pending' });
    expect(results(second)).toEqual([`y1:${NOT_RUN_TOOL_RESULT}`]);
  });
});

describe('loop: budgets', () => {
  it('answers the calls past the tool-call limit "not run", client calls included, then stops', async () => {
    const calls = [
      call('k1', 'client_lookup'),
      call('k2', 'echo', { text: 'ran' }),
      call('k3', 'echo', { text: 'no' }),
    ];
    fake.script({ tool_calls: calls.map(fakeCall) });
    const budget = new TurnBudget({
      agentName: 'assistant',
      limits: { maxToolCalls: 2 },
      sessionTokensBefore: 0,
      compactionTokens: () => 0,
    });
    const turn = recordingTurn();

    await expect(loop({ turn, budget })).rejects.toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(results(turn)).toEqual([
      'k2:ran',
      `k1:${OVER_BUDGET_TOOL_RESULT}`,
      `k3:${OVER_BUDGET_TOOL_RESULT}`,
    ]);
    expect(results(turn)[1]).toMatch(/limits\.maxToolCalls/);
  });

  it('asks the budget before each model call with the usage so far', async () => {
    // The first call's claim (its prompt estimate) fits in 300; after it used
    // 295, the second call's does not.
    fake.script(
      {
        tool_calls: [fakeCall(call('m1', 'echo', { text: 'x' }))],
        usage: { prompt_tokens: 290, completion_tokens: 5 },
      },
      { content: 'never asked' },
    );
    const budget = new TurnBudget({
      agentName: 'assistant',
      limits: { maxTurnTokens: 300 },
      sessionTokensBefore: 0,
      compactionTokens: () => 0,
    });

    await expect(loop({ budget })).rejects.toMatchObject({ code: 'BUDGET_EXCEEDED' });
    expect(fake.requests).toHaveLength(1);
  });
});

describe('loop: broken replies', () => {
  it('nudges once after a blank reply, for the next call only, and stores nothing of it', async () => {
    fake.script(
      { content: '  \n ' },
      { tool_calls: [fakeCall(call('e1', 'echo', { text: 'x' }))] },
      { content: 'answered' },
    );
    const turn = recordingTurn();

    const result = await loop({ turn });

    expect(result).toMatchObject({ kind: 'answer', reply: 'answered' });
    expect(requestLines(1)).toEqual([
      'system:You are a test assistant.',
      'user:hi',
      `user:${EMPTY_REPLY_NUDGE}`,
    ]);
    expect(requestLines(2)).not.toContain(`user:${EMPTY_REPLY_NUDGE}`);
    expect(turn.persisted[0]!.messages[0]).toMatchObject({
      role: 'assistant',
      tool_calls: expect.any(Array),
    });
  });

  it('fails with LLM_ERROR on a second blank reply', async () => {
    fake.script({ content: '' }, { content: ' ' });
    const turn = recordingTurn();

    await expect(loop({ turn })).rejects.toMatchObject({
      code: 'LLM_ERROR',
      message: 'The model returned an empty reply twice. Try again or use another model.',
    });
    expect(turn.persisted).toEqual([]);
  });

  it('runs nothing for calls cut at the token limit and says so next time, but takes cut text as the answer', async () => {
    fake.script(
      { tool_calls: [fakeCall(call('l1', 'echo', { text: 'cut' }))], finish_reason: 'length' },
      { content: 'a long answer, cut', finish_reason: 'length' },
    );
    const turn = recordingTurn();
    const events: LoopEvent[] = [];

    const result = await loop({ turn, onEvent: (e) => events.push(e) });

    expect(result).toMatchObject({ kind: 'answer', reply: 'a long answer, cut' });
    expect(requestLines(1)).toEqual([
      'system:You are a test assistant.',
      'user:hi',
      `user:${TRUNCATED_TOOL_CALL_NOTE}`,
    ]);
    expect(events).toEqual([]);
    expect(turn.persisted.map((p) => p.messages)).toEqual([
      [{ role: 'assistant', content: 'a long answer, cut' }],
    ]);
  });

  const unknown = (id: string): FakeReply => ({ tool_calls: [fakeCall(call(id, 'nope'))] });

  it('gives the model two correction rounds for malformed calls, and fails on the third', async () => {
    fake.script(unknown('n1'), unknown('n2'), { content: 'fixed' });
    const turn = recordingTurn();
    expect(await loop({ turn })).toMatchObject({ kind: 'answer', reply: 'fixed' });
    expect(results(turn)[0]).toBe(
      'n1:Error: there is no tool named "nope". Available tools: echo, boom, ask_user, deploy, client_lookup.',
    );

    fake.script(
      unknown('n3'),
      { tool_calls: [fakeCall(call('n4', 'echo', 'not json'))] },
      unknown('n5'),
    );
    await expect(loop()).rejects.toMatchObject({
      code: 'LLM_ERROR',
      message: expect.stringContaining(
        'invalid tool calls 3 times in a row; stopping after 2 correction rounds',
      ),
    });
  });

  it('counts a reply cut at the token limit as a correction round', async () => {
    const cut = (id: string): FakeReply => ({
      tool_calls: [fakeCall(call(id, 'echo', { text: 'x' }))],
      finish_reason: 'length',
    });
    fake.script(cut('c1'), cut('c2'), cut('c3'));

    await expect(loop()).rejects.toMatchObject({ code: 'LLM_ERROR' });
    expect(fake.requests).toHaveLength(3);
  });

  it('starts counting again after a round of valid calls; a tool that fails is not a malformed call', async () => {
    fake.script(
      unknown('r1'),
      unknown('r2'),
      { tool_calls: [fakeCall(call('r3', 'echo', { text: 'x' }))] },
      unknown('r4'),
      { tool_calls: [fakeCall(call('r5', 'boom'))] },
      { tool_calls: [fakeCall(call('r6', 'boom'))] },
      { tool_calls: [fakeCall(call('r7', 'boom'))] },
      { content: 'done' },
    );

    expect(await loop({ maxIterations: 8 })).toMatchObject({ kind: 'answer', reply: 'done' });
  });

  it('stops with MAX_ITERATIONS after exactly maxIterations model calls', async () => {
    fake.setDefault(() => ({ tool_calls: [{ name: 'echo', arguments: '{"text":"again"}' }] }));

    await expect(loop({ maxIterations: 2 })).rejects.toMatchObject({
      code: 'MAX_ITERATIONS',
      message: expect.stringContaining('made 2 model calls'),
    });
    expect(fake.requests).toHaveLength(2);
  });
});

describe('loop: cancelling', () => {
  it('makes no call when the turn is cancelled before it starts', async () => {
    const controller = new AbortController();
    controller.abort(new Error('gone'));
    const turn = recordingTurn();

    await expect(loop({ turn, signal: controller.signal })).rejects.toThrow('gone');
    expect(fake.requests).toHaveLength(0);
    expect(turn.prepared).toHaveLength(0);
  });

  it('stops a model call that is under way', async () => {
    fake.script({ hang: true });
    const controller = new AbortController();
    const running = loop({ signal: controller.signal });
    while (fake.requests.length === 0) await new Promise((r) => setTimeout(r, 5));

    controller.abort(new Error('client left'));

    await expect(running).rejects.not.toMatchObject({ code: 'LLM_TIMEOUT' });
  });

  it('gives the running call and the calls after it a "cancelled" result, keeping those that ran', async () => {
    const controller = new AbortController();
    let toolSignal: AbortSignal | undefined;
    const waits: Tool = {
      name: 'waits',
      description: 'Runs until cancelled',
      parameters: { type: 'object', properties: {} },
      timeoutMs: 60_000,
      run: (_args, ctx) => {
        toolSignal = ctx.signal;
        controller.abort(new Error('client left'));
        return new Promise(() => undefined);
      },
    };
    fake.script({
      tool_calls: [
        call('z1', 'echo', { text: 'ran' }),
        call('z2', 'waits'),
        call('z3', 'echo', { text: 'never' }),
      ].map(fakeCall),
    });
    const turn = recordingTurn();
    const events: LoopEvent[] = [];

    await expect(
      loop({
        turn,
        tools: new ToolSet([echo, waits]),
        signal: controller.signal,
        onEvent: (e) => events.push(e),
      }),
    ).rejects.toThrow('client left');

    expect(results(turn)).toEqual([
      'z1:ran',
      `z2:${CANCELLED_TOOL_RESULT}`,
      `z3:${CANCELLED_TOOL_RESULT}`,
    ]);
    expect(turn.persisted.map((p) => p.messages.length)).toEqual([1, 1, 1, 1]);
    expect(
      events
        .filter((e) => e.type === 'tool_result')
        .map((e) => e.type === 'tool_result' && e.isError),
    ).toEqual([false, true]);
    expect(toolSignal?.reason).toEqual(new Error('client left'));
    // The model reads why there is no result.
    expect(results(turn)[1]).toMatch(/cancelled before it finished/);
  });

  it('writes nothing more when the cancelled call was the reply’s last', async () => {
    const controller = new AbortController();
    const waits: Tool = {
      name: 'waits',
      description: 'Runs until cancelled',
      parameters: { type: 'object', properties: {} },
      timeoutMs: 60_000,
      run: () => {
        controller.abort(new Error('client left'));
        return new Promise(() => undefined);
      },
    };
    fake.script({
      tool_calls: [call('q1', 'echo', { text: 'ran' }), call('q2', 'waits')].map(fakeCall),
    });
    const turn = recordingTurn();

    await expect(
      loop({ turn, tools: new ToolSet([echo, waits]), signal: controller.signal }),
    ).rejects.toThrow('client left');

    expect(results(turn)).toEqual(['q1:ran', `q2:${CANCELLED_TOOL_RESULT}`]);
    expect(turn.persisted.map((p) => p.messages.length)).toEqual([1, 1, 1]);
  });
});

describe('runApprovedToolCall: one call, every failure a result', () => {
  const run = (tool: Tool, c: ToolCall, signal?: AbortSignal) =>
    runApprovedToolCall(c, {
      tools: new ToolSet([tool]),
      toolContext,
      ...(signal ? { signal } : {}),
    });

  it('turns the value a tool returns into text', async () => {
    const text = async (kind: string) => (await run(shaped, call('s', 'shaped', { kind }))).content;
    expect(await text('undefined')).toBe(EMPTY_TOOL_RESULT);
    expect(await text('null')).toBe(EMPTY_TOOL_RESULT);
    expect(await text('blank')).toBe(EMPTY_TOOL_RESULT);
    expect(await text('spaced')).toBe('  padded  ');
    expect(await text('object')).toBe('{"a":1}');
    expect(await text('zero')).toBe('0');
    expect(await text('circular')).toBe('(the tool returned a value that cannot be shown as text)');
  });

  it('returns the result message and tells whether the call failed', async () => {
    const told: boolean[] = [];
    const ok = await runApprovedToolCall(call('d1', 'deploy', { target: 'prod' }), {
      tools: TOOLS,
      toolContext,
      onResult: (isError) => told.push(isError),
    });
    const failed = await runApprovedToolCall(call('d2', 'boom'), {
      tools: TOOLS,
      toolContext,
      onResult: (isError) => told.push(isError),
    });

    expect(ok).toEqual({ role: 'tool', tool_call_id: 'd1', name: 'deploy', content: 'deployed' });
    expect(failed.content).toBe('Error: the tool "boom" failed: disk on fire');
    expect(told).toEqual([false, true]);
  });

  /** The call's result and whether it was told as a failure. */
  async function told(tool: Tool | undefined, c: ToolCall): Promise<[string | null, boolean[]]> {
    const isError: boolean[] = [];
    const result = await runApprovedToolCall(c, {
      tools: new ToolSet(tool ? [tool] : []),
      toolContext,
      onResult: (failed) => isError.push(failed),
    });
    return [result.content, isError];
  }

  it('gives a call whose tool waits for the user, or for the API client, a placeholder result that is no failure', async () => {
    expect(await told(askUser, call('q1', 'ask_user', { question: 'Which?' }))).toEqual([
      EMPTY_TOOL_RESULT,
      [false],
    ]);
    expect(await told(clientTool, call('q2', 'client_lookup'))).toEqual([
      EMPTY_TOOL_RESULT,
      [false],
    ]);
  });

  it('says when there is no such tool, and that there are none, as a failure', async () => {
    expect(await told(undefined, call('u1', 'ghost'))).toEqual([
      'Error: there is no tool named "ghost". Available tools: none.',
      [true],
    ]);
  });

  it('fails a call whose arguments do not match the tool', async () => {
    const [content, isError] = await told(echo, call('u2', 'echo', { text: 3 }));

    expect(content).toMatch(/^Error: The arguments do not match/);
    expect(isError).toEqual([true]);
  });

  it('passes the validated arguments, with defaults, and the call’s own context', async () => {
    let seen: { args: Record<string, unknown>; callId: string; sessionId: string } | undefined;
    const spy: Tool = {
      ...echo,
      run: (args, ctx) => {
        seen = { args, callId: ctx.callId, sessionId: ctx.sessionId };
        return Promise.resolve('ok');
      },
    };

    await run(spy, call('v1', 'echo', { text: 'hi' }));

    expect(seen).toEqual({ args: { text: 'hi', suffix: '' }, callId: 'v1', sessionId: SESSION_ID });
  });

  it('fails a call that outlasts the tool’s timeout, and aborts what the tool was doing', async () => {
    let toolSignal: AbortSignal | undefined;
    const slow: Tool = {
      name: 'slow',
      description: 'Never finishes',
      parameters: { type: 'object', properties: {} },
      timeoutMs: 50,
      run: (_args, ctx) => {
        toolSignal = ctx.signal;
        return new Promise(() => undefined);
      },
    };

    const result = await run(slow, call('w1', 'slow'));

    expect(result.content).toBe(
      'Error: the tool "slow" failed: the tool did not finish within 50 ms',
    );
    expect(toolSignal?.aborted).toBe(true);
    // The tool can tell a timeout from a cancel by the reason.
    expect(toolSignal?.reason).toEqual(new Error('timeout'));
  });

  it('cancels a running call with the turn, and says it was cancelled', async () => {
    const controller = new AbortController();
    let toolSignal: AbortSignal | undefined;
    const hangs: Tool = {
      name: 'hangs',
      description: 'Runs until cancelled',
      parameters: { type: 'object', properties: {} },
      timeoutMs: 60_000,
      run: (_args, ctx) => {
        toolSignal = ctx.signal;
        setImmediate(() => controller.abort(new Error('stop')));
        return new Promise(() => undefined);
      },
    };

    const result = await run(hangs, call('h1', 'hangs'), controller.signal);

    expect(result.content).toBe(CANCELLED_TOOL_RESULT);
    expect(toolSignal?.reason).toEqual(new Error('stop'));
  });

  it('leaves a finished call alone: no later timeout or cancel reaches its signal', async () => {
    const controller = new AbortController();
    let toolSignal: AbortSignal | undefined;
    const quick: Tool = {
      name: 'quick',
      description: 'Answers at once',
      parameters: { type: 'object', properties: {} },
      timeoutMs: 20,
      run: (_args, ctx) => {
        toolSignal = ctx.signal;
        return Promise.resolve('done');
      },
    };

    expect((await run(quick, call('f1', 'quick'), controller.signal)).content).toBe('done');
    // Past the tool's timeout, then the turn is cancelled.
    await new Promise((r) => setTimeout(r, 60));
    controller.abort(new Error('later'));

    expect(toolSignal?.aborted).toBe(false);
  });
});
