/**
 * How Cairn tasks look to an A2A peer and how a peer's message reads to
 * Cairn: the pure mapping, case by case.
 */
import { Role, TaskState, type Message, type Part } from '@a2a-js/sdk';
import { describe, expect, it } from 'vitest';
import {
  a2aState,
  approvalDecision,
  messageText,
  statusForState,
  toA2ATask,
} from '../../src/a2a/task-view.js';
import type { TaskRow, TaskStatus } from '../../src/store/store.js';

function row(patch: Partial<TaskRow> = {}): TaskRow {
  return {
    id: 'task_1',
    session_id: 'sess_1',
    agent_name: 'assistant',
    status: 'running',
    input: 'Do the thing',
    result: null,
    question: null,
    error: null,
    pending_call_id: null,
    pending_tool: null,
    pending_arguments: null,
    owner_instance: null,
    approval_expires_at: null,
    owner_key: null,
    end_user: null,
    decided_by: null,
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:01.000Z',
    ...patch,
  };
}

function message(...parts: Part['content'][]): Message {
  return {
    messageId: 'm',
    contextId: '',
    taskId: '',
    role: Role.ROLE_USER,
    parts: parts.map((content) => ({ content, metadata: undefined, filename: '', mediaType: '' })),
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const text = (value: string) => ({ $case: 'text' as const, value });
const data = (value: unknown) => ({ $case: 'data' as const, value });

describe('task states', () => {
  it('map every Cairn status, and the filter maps back to the status it lists', () => {
    const expected: Record<TaskStatus, TaskState> = {
      running: TaskState.TASK_STATE_WORKING,
      waiting: TaskState.TASK_STATE_INPUT_REQUIRED,
      interrupted: TaskState.TASK_STATE_INPUT_REQUIRED,
      completed: TaskState.TASK_STATE_COMPLETED,
      failed: TaskState.TASK_STATE_FAILED,
      cancelled: TaskState.TASK_STATE_CANCELED,
    };
    for (const [status, state] of Object.entries(expected)) {
      expect(a2aState(status as TaskStatus), status).toBe(state);
      if (status !== 'interrupted') expect(statusForState(state)).toBe(status);
    }
    for (const state of [
      TaskState.TASK_STATE_SUBMITTED,
      TaskState.TASK_STATE_REJECTED,
      TaskState.TASK_STATE_AUTH_REQUIRED,
    ])
      expect(statusForState(state)).toBeNull();
  });
});

describe('toA2ATask', () => {
  it('a completed task carries its reply as the artifact and the status message', () => {
    const task = toA2ATask(row({ status: 'completed', result: 'Done.' }));
    expect(task).toMatchObject({ id: 'task_1', contextId: 'sess_1' });
    expect(task.status?.timestamp).toBe('2026-01-01T00:00:01.000Z');
    expect(task.artifacts.map((a) => a.artifactId)).toEqual(['reply']);
    expect(task.status?.message?.parts[0]?.content).toEqual(text('Done.'));
    expect(task.history.map((m) => m.role)).toEqual([Role.ROLE_USER, Role.ROLE_AGENT]);
  });

  it('a running task has no artifact and no status message', () => {
    const task = toA2ATask(row());
    expect(task.artifacts).toEqual([]);
    expect(task.status?.message).toBeUndefined();
    expect(task.history).toHaveLength(1);
  });

  it('an approval wait shows the tool and its arguments as text and data', () => {
    const task = toA2ATask(
      row({
        status: 'waiting',
        pending_call_id: 'call_1',
        pending_tool: 'delete_file',
        pending_arguments: '{"path":"/a"}',
        question: 'Approval needed: … POST /tasks/task_1/approve …',
      }),
    );
    const parts = task.status!.message!.parts;
    expect(parts[0]!.content).toEqual(text(expect.stringContaining('"delete_file"')));
    expect(parts[0]!.content).not.toEqual(text(expect.stringContaining('POST /tasks')));
    expect(parts[1]!.content).toEqual(
      data({ approval: { tool: 'delete_file', arguments: '{"path":"/a"}' } }),
    );
  });

  it('historyLength: absent all, 0 none, N the newest N (never more than there is)', () => {
    const done = row({ status: 'completed', result: 'ok' });
    expect(toA2ATask(done).history).toHaveLength(2);
    expect(toA2ATask(done, 0).history).toEqual([]);
    expect(toA2ATask(done, 1).history.map((m) => m.role)).toEqual([Role.ROLE_AGENT]);
    expect(toA2ATask(done, 5).history).toHaveLength(2);
  });
});

describe('messageText', () => {
  it('joins text parts and data parts (as JSON) in order; nothing but blanks is no text', () => {
    expect(messageText(message(text('a'), data({ b: 1 }), text('c')))).toBe('a\n{"b":1}\nc');
    expect(messageText(message(text('  '), text('\n')))).toBeUndefined();
    expect(messageText(message({ $case: 'url', value: 'http://example.com/f' }))).toBeUndefined();
  });
});

describe('approvalDecision', () => {
  it.each([
    ['approve', { decision: 'approve' }],
    ['  Approved!', { decision: 'approve' }],
    ['yes, go ahead', { decision: 'approve' }],
    ['OK', { decision: 'approve' }],
    ['deny', { decision: 'deny' }],
    ['deny: not this month', { decision: 'deny', reason: 'not this month' }],
    ['No - the file is needed', { decision: 'deny', reason: 'the file is needed' }],
    ['reject', { decision: 'deny' }],
  ])('%j is %j', (said, expected) => {
    expect(approvalDecision(message(text(said)))).toEqual(expected);
  });

  it.each([
    'maybe',
    'nope',
    'not ok',
    'okay then',
    'please approve',
    '',
    'approved? no!',
    'yes? no.',
    'ok, but not that file',
    "approve... actually don't",
    'yes no',
  ])('%j is no decision', (said) => {
    expect(approvalDecision(message(text(said)))).toBeUndefined();
  });

  it('reads a data part decision before any text', () => {
    expect(approvalDecision(message(text('no'), data({ decision: 'approve' })))).toEqual({
      decision: 'approve',
    });
    expect(approvalDecision(message(data({ decision: 'deny', reason: 'too risky' })))).toEqual({
      decision: 'deny',
      reason: 'too risky',
    });
    expect(approvalDecision(message(data({ decision: 'perhaps' })))).toBeUndefined();
  });
});
