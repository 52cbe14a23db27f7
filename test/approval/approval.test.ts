/**
 * Tool approval: a tool marked `approval: "required"` (in
 * agent.json, or by its module) is never run by the loop on its own. The task
 * waits with the pending call on its row; POST /tasks/:id/approve runs it and
 * continues, POST /tasks/:id/deny gives the model a refusal (with the
 * reason) and continues. In a chat the turn becomes such a waiting task.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { NOT_RUN_TOOL_RESULT } from '../../src/runtime/loop.js';
import type { TaskRow } from '../../src/store/store.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

/** A side-effecting tool: appends one line per run to calls.log next to it. */
const DELETE_TOOL = `import { appendFileSync } from 'node:fs';
export default {
  name: 'delete_file',
  description: 'Deletes a file.',
  parameters: {
    type: 'object',
    properties: { path: { type: 'string' } },
    required: ['path'],
    additionalProperties: false,
  },
  async run(args) {
    appendFileSync(new URL('./calls.log', import.meta.url), args.path + '\\n');
    return 'deleted ' + args.path;
  },
};
`;
/** The same, but the module itself asks for approval. */
const SELF_GUARDED_TOOL = DELETE_TOOL.replace(
  "name: 'delete_file'",
  "name: 'wipe', approval: 'required'",
);

const GUARDED = {
  name: 'guarded',
  description: 'Acts only with approval',
  system: 'You delete files when asked.',
  tools: [
    'current_time',
    'ask_user',
    { tool: './tools/delete.js', approval: 'required' },
    './tools/wipe.js',
  ],
  maxIterations: 6,
};

interface WireMessage {
  role: string;
  content: string | null;
  tool_calls?: { id: string; function: { name: string } }[];
  tool_call_id?: string;
}

describe('tool approval', () => {
  let t: TestApp;
  const fake = () => t.fake!;

  beforeAll(async () => {
    t = await startTestApp({
      agents: { guarded: GUARDED },
      files: {
        'agents/guarded/tools/delete.js': DELETE_TOOL,
        'agents/guarded/tools/wipe.js': SELF_GUARDED_TOOL,
      },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => fake().reset());

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  /** The paths the tool ran on, in order. */
  function runs(): string[] {
    try {
      return readFileSync(join(t.home, 'agents/guarded/tools/calls.log'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  }

  async function waitingTask(path: string, tool = 'delete_file'): Promise<TaskRow> {
    fake().script({ tool_calls: [{ name: tool, arguments: JSON.stringify({ path }) }] });
    const res = await inject('POST', '/agents/guarded/tasks?wait=true', {
      input: `Delete ${path}`,
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().task as TaskRow;
  }

  it('a task stops before the call, shows it, and runs it once on approve', async () => {
    const before = runs().length;
    const task = await waitingTask('/tmp/a.txt');
    expect(task).toMatchObject({
      status: 'waiting',
      pending_tool: 'delete_file',
      pending_arguments: '{"path":"/tmp/a.txt"}',
    });
    expect(task.pending_call_id).toMatch(/^call_/);
    expect(task.question).toContain('"delete_file"');
    expect(task.question).toContain(`POST /tasks/${task.id}/approve`);
    expect(runs()).toHaveLength(before);
    // The call is stored without a result, and nothing repaired it.
    const stored = (await inject('GET', `/sessions/${task.session_id}/messages`)).json()
      .messages as WireMessage[];
    expect(stored.at(-1)!.tool_calls![0]!.id).toBe(task.pending_call_id);

    fake().script({ content: 'Done: deleted.' });
    const approved = await inject('POST', `/tasks/${task.id}/approve?wait=true`);
    expect(approved.statusCode, approved.body).toBe(200);
    expect(approved.json().task).toMatchObject({
      status: 'completed',
      result: 'Done: deleted.',
      pending_call_id: null,
      pending_tool: null,
      pending_arguments: null,
    });
    expect(runs().slice(before)).toEqual(['/tmp/a.txt']);
    const sent = fake().requests.at(-1)!.body.messages as WireMessage[];
    expect(sent.at(-1)).toEqual({
      role: 'tool',
      tool_call_id: task.pending_call_id,
      content: 'deleted /tmp/a.txt',
    });
    // A second decision finds nothing to decide.
    const again = await inject('POST', `/tasks/${task.id}/approve`);
    expect(again.statusCode).toBe(409);
    expect(again.json().error.code).toBe('TASK_NOT_WAITING');
    expect(runs().slice(before)).toEqual(['/tmp/a.txt']);
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('two decisions at once: exactly one wins, and the tool runs once', async () => {
    const before = runs().length;
    const task = await waitingTask('/twice');
    fake().script({ content: 'Done once.' });
    const results = await Promise.all([
      inject('POST', `/tasks/${task.id}/approve`),
      inject('POST', `/tasks/${task.id}/approve`),
      inject('POST', `/tasks/${task.id}/deny`),
    ]);
    expect(results.map((r) => r.statusCode).sort()).toEqual([200, 409, 409]);
    for (const r of results.filter((res) => res.statusCode === 409)) {
      expect(r.json().error.code).toBe('TASK_NOT_WAITING');
    }
    const done = (await inject('GET', `/tasks/${task.id}`)).json().task as TaskRow;
    const finished = await t.app.tasks.wait(done.id);
    expect(finished.status).toBe('completed');
    // Whichever decision won, the call ran at most once, and only if approved.
    const denied = results[2].statusCode === 200;
    expect(runs().slice(before)).toEqual(denied ? [] : ['/twice']);
  });

  it('deny gives the model the refusal and the reason; the tool never runs', async () => {
    const before = runs().length;
    const task = await waitingTask('/etc/passwd');
    fake().script({ content: 'Understood, I will not delete it.' });
    const denied = await inject('POST', `/tasks/${task.id}/deny?wait=true`, {
      reason: 'that file is needed',
    });
    expect(denied.statusCode, denied.body).toBe(200);
    expect(denied.json().task).toMatchObject({
      status: 'completed',
      result: 'Understood, I will not delete it.',
    });
    expect(runs()).toHaveLength(before);
    const result = (fake().requests.at(-1)!.body.messages as WireMessage[]).at(-1)!;
    expect(result).toMatchObject({ role: 'tool', tool_call_id: task.pending_call_id });
    expect(result.content).toContain('denied');
    expect(result.content).toContain('Their reason: that file is needed. Do not call it again');
    const events = await t.app.store.listEvents({
      afterId: 0,
      sessionId: task.session_id,
      limit: 100,
    });
    expect(events.map((e) => e.type)).toEqual(
      expect.arrayContaining(['task.waiting', 'task.denied', 'task.completed']),
    );
  });

  it('a module that exports approval "required" waits too; other calls of the reply run first', async () => {
    const before = runs().length;
    fake().script({
      tool_calls: [
        { name: 'wipe', arguments: JSON.stringify({ path: '/w' }) },
        { name: 'current_time', arguments: '{}' },
        { name: 'delete_file', arguments: JSON.stringify({ path: '/d' }) },
      ],
    });
    const res = await inject('POST', '/agents/guarded/tasks?wait=true', { input: 'Clean up' });
    const task = res.json().task as TaskRow;
    expect(task).toMatchObject({ status: 'waiting', pending_tool: 'wipe' });
    expect(runs()).toHaveLength(before);
    const stored = (await inject('GET', `/sessions/${task.session_id}/messages`)).json()
      .messages as WireMessage[];
    const results = stored.filter((m) => m.role === 'tool');
    // current_time ran; the second guarded call was not run (the model may call it again).
    expect(results.map((m) => [m.tool_call_id !== task.pending_call_id, m.content])).toEqual([
      [true, expect.stringMatching(/\d{4}-\d{2}-\d{2}/)],
      [true, NOT_RUN_TOOL_RESULT],
    ]);

    fake().script({ content: 'Wiped.' });
    const approved = await inject('POST', `/tasks/${task.id}/approve?wait=true`);
    expect(approved.json().task.status).toBe('completed');
    expect(runs().slice(before)).toEqual(['/w']);
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('approve, deny and resume refuse tasks that do not wait for them', async () => {
    // A completed task.
    fake().script({ content: 'nothing to do' });
    const done = (await inject('POST', '/agents/guarded/tasks?wait=true', { input: 'hi' })).json()
      .task as TaskRow;
    for (const decision of ['approve', 'deny']) {
      const res = await inject('POST', `/tasks/${done.id}/${decision}`);
      expect(res.statusCode).toBe(409);
      expect(res.json().error.code).toBe('TASK_NOT_WAITING');
      expect(res.json().error.message).toContain('not waiting for approval');
    }
    // A task waiting for an answer, not for approval.
    fake().script({
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which?' }) }],
    });
    const asking = (
      await inject('POST', '/agents/guarded/tasks?wait=true', { input: 'Delete something' })
    ).json().task as TaskRow;
    expect(asking.status).toBe('waiting');
    expect((await inject('POST', `/tasks/${asking.id}/approve`)).statusCode).toBe(409);
    // A task waiting for approval cannot be resumed with an answer.
    const guarded = await waitingTask('/x');
    const resumed = await inject('POST', `/tasks/${guarded.id}/resume`, { answer: 'yes' });
    expect(resumed.statusCode).toBe(409);
    expect(resumed.json().error.message).toContain(`/tasks/${guarded.id}/approve`);
    // Bad input.
    const unknown = await inject('POST', '/tasks/task_doesnotexist/approve');
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('TASK_NOT_FOUND');
    const extra = await inject('POST', `/tasks/${guarded.id}/deny`, { reason: 'x', force: true });
    expect(extra.statusCode).toBe(400);
    expect(extra.json().error.code).toBe('VALIDATION_ERROR');
    const approveBody = await inject('POST', `/tasks/${guarded.id}/approve`, { reason: 'x' });
    expect(approveBody.statusCode).toBe(400);
    // Still waiting after the refused requests; cancel answers the open call.
    const cancelled = await inject('POST', `/tasks/${guarded.id}/cancel`);
    expect(cancelled.json().task).toMatchObject({ status: 'cancelled', pending_tool: null });
  });

  it('in a chat, the reply says approval is needed and how; approve continues the session', async () => {
    const before = runs().length;
    fake().script({
      tool_calls: [{ name: 'delete_file', arguments: JSON.stringify({ path: '/c' }) }],
    });
    const res = await inject('POST', '/agents/guarded/chat', { message: 'Delete /c' });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    const taskId = body.pendingApproval.taskId as string;
    expect(body.pendingApproval).toMatchObject({
      tool: 'delete_file',
      arguments: '{"path":"/c"}',
    });
    expect(body.reply).toContain('Approval needed');
    expect(body.reply).toContain(`POST /tasks/${taskId}/approve`);
    expect(body.reply).toContain(`POST /tasks/${taskId}/deny`);
    expect(runs()).toHaveLength(before);
    const task = (await inject('GET', `/tasks/${taskId}`)).json().task as TaskRow;
    expect(task).toMatchObject({
      status: 'waiting',
      session_id: body.sessionId,
      input: 'Delete /c',
      pending_tool: 'delete_file',
    });

    // The session waits for the decision.
    const blocked = await inject('POST', '/agents/guarded/chat', {
      message: 'yes, approved',
      sessionId: body.sessionId,
    });
    expect(blocked.statusCode).toBe(409);
    expect(blocked.json().error.code).toBe('TASK_WAITING');
    expect(blocked.json().error.message).toContain(`/tasks/${taskId}/approve`);
    expect(runs()).toHaveLength(before);

    fake().script({ content: 'Deleted /c.' });
    const approved = await inject('POST', `/tasks/${taskId}/approve?wait=true`);
    expect(approved.json().task).toMatchObject({ status: 'completed', result: 'Deleted /c.' });
    expect(runs().slice(before)).toEqual(['/c']);

    fake().script({ content: 'Anything else?' });
    const next = await inject('POST', '/agents/guarded/chat', {
      message: 'thanks',
      sessionId: body.sessionId,
    });
    expect(next.statusCode).toBe(200);
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });
});
