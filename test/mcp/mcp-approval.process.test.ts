/**
 * Approval of MCP tools: an `mcp:` entry
 * marked `approval: "required"` in agent.json never runs on the model's word.
 * The chat turn becomes a waiting task with the call on its row; approve runs
 * it on the real MCP server (the reference "everything" server, a child
 * process) and the model reads its result; deny never reaches the server.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { TaskRow } from '../../src/store/store.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { everythingStdio } from './mcp-servers.js';

interface WireMessage {
  role: string;
  content: string | null;
}

describe('MCP tools that need approval', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: {
          name: 'assistant',
          system: 'You echo things.',
          tools: [{ tool: 'mcp:everything/echo', approval: 'required' }],
          maxIterations: 4,
        },
      },
      mcpServers: { everything: everythingStdio() },
    });
  }, 60_000);
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  async function chatUntilApproval(text: string): Promise<TaskRow> {
    t.fake!.script(
      { tool_calls: [{ name: 'everything__echo', arguments: JSON.stringify({ message: text }) }] },
      { content: 'done' },
    );
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: `echo ${text}` },
    });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json<{ pendingApproval?: { taskId: string; tool: string } }>();
    expect(body.pendingApproval?.tool).toBe('everything__echo');
    // The model was asked once; the call waits for a person, not for the server.
    expect(t.fake!.requests).toHaveLength(1);
    const task = await t.app.server.inject({
      method: 'GET',
      url: `/tasks/${body.pendingApproval!.taskId}`,
    });
    return task.json<{ task: TaskRow }>().task;
  }

  const toolResult = (): string => {
    const messages = (t.fake!.requests.at(-1)!.body?.messages ?? []) as WireMessage[];
    return messages.filter((m) => m.role === 'tool').at(-1)?.content ?? '';
  };

  it('approve runs the call on the MCP server and the loop goes on', async () => {
    const task = await chatUntilApproval('approved-text');
    expect(task).toMatchObject({ status: 'waiting', pending_tool: 'everything__echo' });
    const approved = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/approve?wait=true`,
    });
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json<{ task: TaskRow }>().task).toMatchObject({
      status: 'completed',
      result: 'done',
    });
    expect(t.fake!.requests).toHaveLength(2);
    expect(toolResult()).toContain('approved-text');
    expect(t.fake!.requests.at(-1)!.problems).toEqual([]);
  });

  it('deny gives the model the refusal; the server is never called', async () => {
    const task = await chatUntilApproval('denied-text');
    const denied = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${task.id}/deny?wait=true`,
      payload: { reason: 'not today' },
    });
    expect(denied.statusCode, denied.body).toBe(200);
    expect(toolResult()).toContain('not today');
    expect(toolResult()).not.toContain('denied-text');
  });
});
