/**
 * Subagents: `agent:<name>` becomes a tool
 * `agent_<name> {input}` that runs the other agent in a fresh, then closed,
 * `subagent` session under the caller's; its answer is the tool result.
 * Cycles and the depth limit are refused before anything is spawned, and a
 * failing subagent is an error result the caller can read and get past.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SUBAGENTS_PER_RUN } from '../../src/runtime/tool-context.js';
import { SUBAGENT_MAX_DEPTH } from '../../src/runtime/subagents.js';
import type { SessionRow } from '../../src/store/store.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

function agent(name: string, tools: string[]): Record<string, unknown> {
  return {
    name,
    description: `Agent ${name}`,
    system: `You are agent ${name}.`,
    tools,
    maxIterations: 4,
  };
}

/** l0 → l1 → l2 → l3 → l4: one level deeper than SUBAGENT_MAX_DEPTH allows. */
const CHAIN = ['l0', 'l1', 'l2', 'l3', 'l4'];

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

function call(target: string, input: string) {
  return { tool_calls: [{ name: `agent_${target}`, arguments: JSON.stringify({ input }) }] };
}

describe('subagents', () => {
  let t: TestApp;
  beforeAll(async () => {
    const agents: Record<string, Record<string, unknown>> = {
      boss: agent('boss', ['agent:researcher']),
      researcher: agent('researcher', []),
      ping: agent('ping', ['agent:pong']),
      pong: agent('pong', ['agent:ping']),
    };
    CHAIN.forEach((name, i) => {
      const next = CHAIN[i + 1];
      agents[name] = agent(name, next ? [`agent:${next}`] : []);
    });
    t = await startTestApp({ agents });
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  async function sessions(query: string): Promise<SessionRow[]> {
    const res = await t.app.server.inject({ url: `/sessions?${query}` });
    expect(res.statusCode).toBe(200);
    return res.json().sessions as SessionRow[];
  }

  function chat(agentName: string, message: string) {
    return t.app.server.inject({
      method: 'POST',
      url: `/agents/${agentName}/chat`,
      payload: { message },
    });
  }

  /** The tool result answering the first call in a request's messages. */
  function toolResult(messages: WireMessage[]): WireMessage | undefined {
    const at = messages.findIndex((m) => m.tool_calls);
    return messages[at + 1]?.role === 'tool' ? messages[at + 1] : undefined;
  }

  it('one run starts at most SUBAGENTS_PER_RUN subagents; the rest get an error result, nothing spawned', async () => {
    const calls = Array.from({ length: SUBAGENTS_PER_RUN + 2 }, (_, i) => ({
      name: 'agent_researcher',
      arguments: JSON.stringify({ input: `question ${i}` }),
    }));
    // The boss asks for 12 subagents in one reply; each started one answers, then the boss does.
    t.fake!.setDefault((body: { messages: WireMessage[] }) =>
      body.messages[0]?.content === 'You are agent researcher.'
        ? { content: 'an answer' }
        : { content: 'done' },
    );
    t.fake!.script({ tool_calls: calls });
    const res = await chat('boss', 'research a lot');
    expect(res.statusCode).toBe(200);
    const bossSession = res.json().sessionId as string;
    const children = await sessions(`parentSessionId=${bossSession}`);
    expect(children).toHaveLength(SUBAGENTS_PER_RUN);
    const history = (
      await t.app.server.inject({ url: `/sessions/${bossSession}/messages?limit=100` })
    ).json().messages as WireMessage[];
    const results = history.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    expect(results.filter((c) => c === 'an answer')).toHaveLength(SUBAGENTS_PER_RUN);
    const refused = results.filter((c) => /already started 10 subagents/.test(c));
    expect(refused).toHaveLength(2);
  });

  it('the caller gets a tool per subagent, described by the subagent', async () => {
    t.fake!.script({ content: 'hi' });
    await chat('boss', 'hello');
    const tools = t.fake!.requests[0]!.body.tools as {
      function: { name: string; description: string };
    }[];
    expect(tools.map((tool) => tool.function.name)).toEqual(['agent_researcher']);
    expect(tools[0]!.function.description).toContain('Agent researcher');
  });

  it('runs the subagent in a closed child session and returns its answer as the tool result', async () => {
    t.fake!.script(
      call('researcher', 'Find the boiling point of water.'),
      { content: '100 °C at sea level.' },
      { content: 'The researcher says: 100 °C.' },
    );
    const res = await chat('boss', 'How hot does water boil?');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('The researcher says: 100 °C.');
    const sessionId = res.json().sessionId as string;

    const [bossFirst, researcher, bossSecond] = t.fake!.requests.map(
      (r) => r.body.messages as WireMessage[],
    );
    expect(researcher).toEqual([
      { role: 'system', content: 'You are agent researcher.' },
      { role: 'user', content: 'Find the boiling point of water.' },
    ]);
    expect(bossFirst!.at(-1)).toEqual({ role: 'user', content: 'How hot does water boil?' });
    const result = toolResult(bossSecond!);
    expect(result).toMatchObject({ role: 'tool', content: '100 °C at sea level.' });
    expect(bossSecond!.at(-1)).toBe(result);
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);

    const children = await sessions(`parentSessionId=${sessionId}`);
    expect(children).toHaveLength(1);
    expect(children[0]).toMatchObject({
      agent_name: 'researcher',
      mode: 'subagent',
      status: 'closed',
      parent_session_id: sessionId,
    });
    const childMessages = (
      await t.app.server.inject({ url: `/sessions/${children[0]!.id}/messages` })
    ).json().messages as WireMessage[];
    expect(childMessages.map((m) => m.content)).toEqual([
      'You are agent researcher.',
      'Find the boiling point of water.',
      '100 °C at sea level.',
    ]);
  });

  it('a cycle (ping → pong → ping) is an error result and spawns nothing', async () => {
    t.fake!.script(
      call('pong', 'Ask ping.'),
      call('ping', 'Back to you.'),
      { content: 'pong could not call ping.' },
      { content: 'ping is done.' },
    );
    const res = await chat('ping', 'Start the rally.');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('ping is done.');
    const rootId = res.json().sessionId as string;

    expect(t.fake!.requests).toHaveLength(4);
    const pongSecond = t.fake!.requests[2]!.body.messages as WireMessage[];
    const refused = toolResult(pongSecond)!;
    expect(refused.content).toMatch(/^Error: /);
    expect(refused.content).toMatch(/cycle/);
    expect(refused.content).toContain('ping → pong → ping');
    expect(toolResult(t.fake!.requests[3]!.body.messages as WireMessage[])!.content).toBe(
      'pong could not call ping.',
    );

    const children = await sessions(`parentSessionId=${rootId}`);
    expect(children.map((s) => s.agent_name)).toEqual(['pong']);
    expect(await sessions(`parentSessionId=${children[0]!.id}`)).toEqual([]);
    expect(await sessions('agentName=ping')).toHaveLength(1);
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it(`the depth limit (${SUBAGENT_MAX_DEPTH} levels) refuses a fourth level before spawning it`, async () => {
    t.fake!.script(
      call('l1', 'go down'),
      call('l2', 'go down'),
      call('l3', 'go down'),
      call('l4', 'go down'),
      { content: 'l3 stops here.' },
      { content: 'l2 done.' },
      { content: 'l1 done.' },
      { content: 'l0 done.' },
    );
    const res = await chat('l0', 'Dig.');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('l0 done.');

    expect(t.fake!.requests).toHaveLength(8);
    const l3Second = t.fake!.requests[4]!.body.messages as WireMessage[];
    expect(l3Second[0]!.content).toBe('You are agent l3.');
    const refused = toolResult(l3Second)!;
    expect(refused.content).toMatch(/^Error: /);
    expect(refused.content).toContain(`depth limit (${SUBAGENT_MAX_DEPTH})`);
    expect(refused.content).toContain('nothing was started');

    expect(await sessions('agentName=l4')).toEqual([]);
    for (const name of ['l1', 'l2', 'l3']) {
      const [child] = await sessions(`agentName=${name}`);
      expect(child).toMatchObject({ mode: 'subagent', status: 'closed' });
    }
    // The chain of parents leads back to the chat session.
    let session = (await sessions('agentName=l3'))[0]!;
    const lineage = [session.agent_name];
    while (session.parent_session_id) {
      session = (
        await t.app.server.inject({ url: `/sessions/${session.parent_session_id}` })
      ).json().session as SessionRow;
      lineage.unshift(session.agent_name);
    }
    expect(lineage).toEqual(['l0', 'l1', 'l2', 'l3']);
    expect(session.mode).toBe('chat');
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('a failing subagent is an error result and the caller still answers', async () => {
    t.fake!.script(
      call('researcher', 'Look this up.'),
      { status: 400 },
      { content: 'The researcher failed; here is my best guess.' },
    );
    const res = await chat('boss', 'Question.');
    expect(res.statusCode).toBe(200);
    expect(res.json().reply).toBe('The researcher failed; here is my best guess.');
    const last = t.fake!.requests.at(-1)!.body.messages as WireMessage[];
    const result = toolResult(last)!;
    expect(result.content).toMatch(/^Error: the tool "agent_researcher" failed: /);
    expect(result.content).toContain('400');

    const children = await sessions(`parentSessionId=${res.json().sessionId as string}`);
    expect(children).toHaveLength(1);
    expect(children[0]!.status).toBe('closed');
    expect(t.fake!.requests.every((r) => r.problems.length === 0)).toBe(true);
  });

  it('a subagent used by a task: the task completes with the caller’s answer', async () => {
    t.fake!.script(
      call('researcher', 'Count to three.'),
      { content: 'one two three' },
      { content: 'Counted: one two three.' },
    );
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/boss/tasks?wait=true',
      payload: { input: 'Have someone count.' },
    });
    expect(res.json().task).toMatchObject({
      status: 'completed',
      result: 'Counted: one two three.',
    });
    const children = await sessions(`parentSessionId=${res.json().task.session_id as string}`);
    expect(children.map((s) => [s.mode, s.status])).toEqual([['subagent', 'closed']]);
  });
});
