/**
 * Tool modules in an agent's folder: a valid
 * call runs with the session in its context; arguments that fail the
 * module's schema are an error result carrying the schema and `run` is never
 * called; a tool slower than its `timeoutMs` is an error result and the loop
 * goes on; a module path that leaves the agent folder rejects the agent at load.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ECHO_PARAMETERS = {
  type: 'object',
  properties: { text: { type: 'string', minLength: 1 }, times: { type: 'integer', minimum: 1 } },
  required: ['text'],
  additionalProperties: false,
};

/** Records every call in calls.log next to the module, so a test can tell whether `run` ran. */
const ECHO_MODULE = `import { appendFileSync } from 'node:fs';
export default {
  name: 'echo_ctx',
  description: 'Echoes its text with the session it ran in.',
  parameters: ${JSON.stringify(ECHO_PARAMETERS)},
  async run(args, ctx) {
    const hits = await ctx.history.searchHistory(ctx.sessionId, args.text, 5);
    appendFileSync(new URL('./calls.log', import.meta.url), JSON.stringify({ args, sessionId: ctx.sessionId, agentName: ctx.agentName, callId: ctx.callId, ports: Object.keys(ctx).filter((k) => ['store', 'history', 'memory'].includes(k)).sort(), historyHits: hits.map((h) => h.role) }) + '\\n');
    return 'session=' + ctx.sessionId + ' text=' + args.text.repeat(args.times ?? 1);
  },
};
`;

/** Never settles by itself; notes when the abort signal reaches it. */
const SLOW_MODULE = `import { appendFileSync } from 'node:fs';
export const name = 'slow_tool';
export const description = 'Takes forever.';
export const parameters = { type: 'object', properties: {}, additionalProperties: false };
export const timeoutMs = 200;
export function run(_args, ctx) {
  ctx.signal.addEventListener('abort', () => appendFileSync(new URL('./slow.log', import.meta.url), 'aborted\\n'));
  return new Promise(() => {});
}
`;

const THROWING_MODULE = `export default {
  name: 'throwing_tool',
  description: 'Always fails.',
  parameters: { type: 'object' },
  async run() { throw new Error('the database is on fire'); },
};
`;

const OUTSIDE_MODULE = `export default { name: 'outside', description: 'x', parameters: {}, run() { return 'escaped'; } };
`;

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; function: { name: string } }[];
  tool_call_id?: string;
}

const TOOLS_DIR = 'agents/toolsmith/tools';

describe('custom tool modules', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        toolsmith: {
          name: 'toolsmith',
          description: 'Uses its own tools',
          system: 'You use your tools.',
          tools: ['./tools/echo.js', './tools/slow.js', './tools/throwing.mjs'],
          maxIterations: 5,
        },
        // Both try to load a module from outside their folder.
        escaper: {
          name: 'escaper',
          system: 'You escape.',
          tools: ['./../outside.js'],
        },
        climber: {
          name: 'climber',
          system: 'You climb.',
          tools: ['../outside.js'],
        },
      },
      files: {
        [`${TOOLS_DIR}/echo.js`]: ECHO_MODULE,
        [`${TOOLS_DIR}/slow.js`]: SLOW_MODULE,
        [`${TOOLS_DIR}/throwing.mjs`]: THROWING_MODULE,
        'agents/outside.js': OUTSIDE_MODULE,
      },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  const callsLog = (): string => join(t.home, TOOLS_DIR, 'calls.log');
  const loggedCalls = (): { args: unknown; sessionId: string; callId: string }[] =>
    existsSync(callsLog())
      ? readFileSync(callsLog(), 'utf8')
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as { args: unknown; sessionId: string; callId: string })
      : [];

  function chat(message: string) {
    return t.app.server.inject({
      method: 'POST',
      url: '/agents/toolsmith/chat',
      payload: { message },
    });
  }

  function lastToolResult(): WireMessage {
    return (t.fake!.requests.at(-1)!.body.messages as WireMessage[]).findLast(
      (m) => m.role === 'tool',
    )!;
  }

  it('offers the module tools to the model with their schemas', async () => {
    t.fake!.script({ content: 'hi' });
    await chat('hello');
    const tools = t.fake!.requests[0]!.body.tools as {
      function: { name: string; description: string; parameters: unknown };
    }[];
    expect(tools.map((tool) => tool.function.name)).toEqual([
      'echo_ctx',
      'slow_tool',
      'throwing_tool',
    ]);
    expect(tools[0]!.function.parameters).toEqual(ECHO_PARAMETERS);
  });

  it('a valid call runs the module with the session id and the history and memory ports (never the store) in its context', async () => {
    t.fake!.script(
      {
        tool_calls: [
          {
            id: 'call_echo1',
            name: 'echo_ctx',
            arguments: JSON.stringify({ text: 'ab', times: 2 }),
          },
        ],
      },
      { content: 'Echoed.' },
    );
    const res = await chat('Echo ab twice.');
    expect(res.statusCode).toBe(200);
    const sessionId = res.json().sessionId as string;
    expect(lastToolResult()).toMatchObject({
      tool_call_id: 'call_echo1',
      content: `session=${sessionId} text=abab`,
    });
    const calls = loggedCalls();
    expect(calls.at(-1)).toEqual({
      args: { text: 'ab', times: 2 },
      sessionId,
      agentName: 'toolsmith',
      callId: 'call_echo1',
      ports: ['history', 'memory'],
      historyHits: ['user'],
    });
    expect(res.json().reply).toBe('Echoed.');
  });

  it('arguments that fail the schema are an error result with the schema; run is not called', async () => {
    const before = loggedCalls().length;
    t.fake!.script(
      {
        tool_calls: [
          { name: 'echo_ctx', arguments: JSON.stringify({ text: 5 }) },
          { name: 'echo_ctx', arguments: JSON.stringify({ text: 'ok', colour: 'red' }) },
          { name: 'echo_ctx', arguments: '{"text": "unterminated' },
          { name: 'echo_ctx', arguments: '["not", "an", "object"]' },
          { name: 'echo_ctx', arguments: '' },
        ],
      },
      { content: 'I will fix my arguments.' },
    );
    const res = await chat('Break it.');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('I will fix my arguments.');
    const results = (t.fake!.requests.at(-1)!.body.messages as WireMessage[]).filter(
      (m) => m.role === 'tool',
    );
    expect(results).toHaveLength(5);
    for (const result of results) {
      expect(result.content).toMatch(/^Error: The arguments/);
      expect(result.content).toContain(JSON.stringify(ECHO_PARAMETERS));
    }
    expect(results[0]!.content).toContain('/text must be string');
    expect(results[1]!.content).toContain('must NOT have additional properties');
    expect(results[2]!.content).toContain('not valid JSON');
    expect(results[3]!.content).toContain('must be a JSON object');
    // "" means {}: valid JSON, but `text` is required.
    expect(results[4]!.content).toContain("must have required property 'text'");
    expect(loggedCalls()).toHaveLength(before);
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('a tool slower than its timeoutMs is an error result, it is aborted, and the loop goes on', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'slow_tool', arguments: '{}' }] },
      { tool_calls: [{ name: 'echo_ctx', arguments: JSON.stringify({ text: 'after' }) }] },
      { content: 'Moved on.' },
    );
    const res = await chat('Be slow.');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('Moved on.');
    const results = (t.fake!.requests.at(-1)!.body.messages as WireMessage[]).filter(
      (m) => m.role === 'tool',
    );
    expect(results[0]!.content).toMatch(/^Error: the tool "slow_tool" failed: /);
    expect(results[0]!.content).toContain('200 ms');
    expect(results[1]!.content).toContain('text=after');
    expect(readFileSync(join(t.home, TOOLS_DIR, 'slow.log'), 'utf8')).toContain('aborted');
  });

  it('a tool that throws is an error result with its message', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'throwing_tool', arguments: '{}' }] },
      { content: 'That tool is broken.' },
    );
    const res = await chat('Use the broken tool.');
    expect(res.statusCode).toBe(200);
    expect(lastToolResult().content).toBe(
      'Error: the tool "throwing_tool" failed: the database is on fire',
    );
  });

  it('a call to a tool the agent does not have is an error result', async () => {
    t.fake!.script(
      { tool_calls: [{ name: 'outside', arguments: '{}' }] },
      { content: 'No such tool.' },
    );
    const res = await chat('Escape.');
    expect(res.statusCode).toBe(200);
    expect(lastToolResult().content).toMatch(/^Error: there is no tool named "outside"/);
  });

  it('a module path that leaves the agent folder rejects the agent at load', async () => {
    const problems = t.app.agentProblems;
    const escaper = problems.find((p) => p.file.endsWith(join('escaper', 'agent.json')));
    expect(escaper).toMatchObject({ pointer: '/tools/0', rule: 'path-escape' });
    const climber = problems.find((p) => p.file.endsWith(join('climber', 'agent.json')));
    expect(climber).toMatchObject({ pointer: '/tools/0', rule: 'pattern' });

    for (const name of ['escaper', 'climber']) {
      const res = await t.app.server.inject({ url: `/agents/${name}` });
      expect(res.statusCode).toBe(404);
      expect(res.json().error.code).toBe('AGENT_NOT_FOUND');
    }
    const agents = (await t.app.server.inject({ url: '/agents' })).json().agents as {
      name: string;
    }[];
    expect(agents.map((a) => a.name)).toEqual(['toolsmith']);
  });
});
