/** The tasks page: filters by agent and status, and each task's created and updated times. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Api } from '../src/lib/api';
import { formatTime } from '../src/lib/format';
import { ApiContext } from '../src/lib/hooks';
import type { Task } from '../src/lib/types';
import { TaskItem, tasksQuery } from '../src/views/TasksView';

/** A task as `GET /tasks` returns it. */
const TASK: Task = {
  id: 'task_5rT1uV9wX3yZ7aB2cD4eF6gH',
  session_id: 'sess_1aB2cD3eF4gH5iJ6kL7mN8oP',
  agent_name: 'planner',
  status: 'completed',
  input: 'Plan a weekend in Lyon',
  result: 'Saturday: the old town. Sunday: the museums.',
  question: null,
  error: null,
  pending_tool: null,
  pending_arguments: null,
  created_at: '2026-03-02T09:15:00.000Z',
  updated_at: '2026-03-02T09:16:30.000Z',
};

const api = new Api({
  onUnauthorized: () => undefined,
  storage: { getItem: () => null, setItem: () => undefined, removeItem: () => undefined },
});
const render = (task: Task) =>
  renderToString(
    <ApiContext.Provider value={api}>
      <TaskItem task={task} onChange={() => undefined} />
    </ApiContext.Provider>,
  );

describe('tasksQuery', () => {
  it('asks for the agent and the status chosen, and leaves out an empty filter', () => {
    expect(tasksQuery({ status: '', agentName: '' })).toBe('/tasks?limit=50');
    expect(tasksQuery({ status: 'waiting', agentName: 'planner' })).toBe(
      '/tasks?limit=50&agentName=planner&status=waiting',
    );
    expect(tasksQuery({ status: 'failed', agentName: '' })).toBe('/tasks?limit=50&status=failed');
  });
});

describe('<TaskItem>', () => {
  it('shows when the task was created and last updated, with its agent', () => {
    const html = render(TASK);
    expect(html).toContain(
      `Created <time datetime="${TASK.created_at}">${formatTime(TASK.created_at)}</time>`,
    );
    expect(html).toContain(
      `updated <time datetime="${TASK.updated_at}">${formatTime(TASK.updated_at)}</time>`,
    );
    expect(html).toContain('planner');
    expect(html).toContain('Saturday: the old town.');
  });

  it('shows one time for a task that never changed after it was created', () => {
    const html = render({ ...TASK, status: 'running', result: null, updated_at: TASK.created_at });
    expect(html).toContain('Created <time');
    expect(html).not.toContain('updated <time');
  });

  it('labels the task’s input and its result', () => {
    const html = render(TASK);
    expect(html).toContain('<dt>Input</dt><dd class="input">Plan a weekend in Lyon</dd>');
    expect(html).toContain(
      '<dt>Result</dt><dd class="result">Saturday: the old town. Sunday: the museums.</dd>',
    );
  });

  it('labels a failed task’s error, and shows no result it does not have', () => {
    const html = render({ ...TASK, status: 'failed', result: null, error: 'The model refused.' });
    expect(html).toContain('<dt>Error</dt><dd class="error">The model refused.</dd>');
    expect(html).not.toContain('<dt>Result</dt>');
  });
});
