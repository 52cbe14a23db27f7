/**
 * Tasks, filtered by agent and status: when each was created and last
 * changed, its input and result (or error) labelled, and for a waiting task its question with a box to
 * answer it, or the tool call it waits on with Approve and Deny.
 */
import { useState } from 'preact/hooks';
import { useApi, useLiveEvents, useLoad } from '../lib/hooks';
import { href, onLinkClick } from '../lib/router';
import { formatTime } from '../lib/format';
import type { Agent, Task } from '../lib/types';
import { ErrorNote } from './ErrorNote';

const STATUSES: readonly Task['status'][] = [
  'running',
  'waiting',
  'completed',
  'failed',
  'cancelled',
  'interrupted',
];

/** The `GET /tasks` address for the filters (an empty filter is left out). */
export function tasksQuery(filters: { status: string; agentName: string }): string {
  const query = new URLSearchParams({ limit: '50' });
  if (filters.agentName) query.set('agentName', filters.agentName);
  if (filters.status) query.set('status', filters.status);
  return `/tasks?${query}`;
}

export function TasksView() {
  const api = useApi();
  const [status, setStatus] = useState('');
  const [agentName, setAgentName] = useState('');
  const agents = useLoad(() => api.get<{ agents: Agent[] }>('/agents'), []);
  const tasks = useLoad(
    () => api.get<{ tasks: Task[] }>(tasksQuery({ status, agentName })),
    [status, agentName],
  );
  useLiveEvents(undefined, tasks.reload);
  return (
    <section class="main wide" aria-labelledby="tasks-title">
      <h2 id="tasks-title">Tasks</h2>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Agent
          <select value={agentName} onChange={(e) => setAgentName(e.currentTarget.value)}>
            <option value="">all</option>
            {(agents.data?.agents ?? []).map((a) => (
              <option key={a.name} value={a.name}>
                {a.name}
              </option>
            ))}
          </select>
        </label>
        <label>
          Status
          <select value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            <option value="">all</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </label>
      </form>
      <ErrorNote error={tasks.error} />
      <ul class="tasks">
        {(tasks.data?.tasks ?? []).map((t) => (
          <TaskItem key={t.id} task={t} onChange={tasks.reload} />
        ))}
        {tasks.data?.tasks.length === 0 && (
          <li>{status || agentName ? 'No tasks match.' : 'No tasks.'}</li>
        )}
      </ul>
    </section>
  );
}

export function TaskItem({ task, onChange }: { task: Task; onChange: () => void }) {
  const api = useApi();
  const [answer, setAnswer] = useState('');
  const [reason, setReason] = useState('');
  const [error, setError] = useState<string>();
  const answerId = `answer-${task.id}`;
  const reasonId = `reason-${task.id}`;
  const approval = task.status === 'waiting' && task.pending_tool ? task.pending_tool : undefined;
  const act = async (path: string, body?: unknown) => {
    setError(undefined);
    try {
      await api.post(path, body);
      setAnswer('');
      onChange();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <li class={`task task-${task.status}`}>
      <p>
        <strong class="status">{task.status}</strong> · {task.agent_name} ·{' '}
        <a href={href(`sessions/${task.session_id}`)} onClick={onLinkClick}>
          {task.id}
        </a>
      </p>
      <p class="times">
        Created <time dateTime={task.created_at}>{formatTime(task.created_at)}</time>
        {task.updated_at !== task.created_at && (
          <>
            {' '}
            · updated <time dateTime={task.updated_at}>{formatTime(task.updated_at)}</time>
          </>
        )}
      </p>
      <dl class="task-io">
        <dt>Input</dt>
        <dd class="input">{task.input}</dd>
        {task.result && (
          <>
            <dt>Result</dt>
            <dd class="result">{task.result}</dd>
          </>
        )}
        {task.error && (
          <>
            <dt>Error</dt>
            <dd class="error">{task.error}</dd>
          </>
        )}
      </dl>
      {approval !== undefined && (
        <form class="approval" onSubmit={(e) => e.preventDefault()}>
          <p class="question">
            Approval needed: <code>{approval}</code> with arguments{' '}
            <code>{task.pending_arguments || '{}'}</code>
          </p>
          <label for={reasonId}>Reason (optional, the agent sees it when you deny)</label>
          <input id={reasonId} value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
          <button type="button" onClick={() => void act(`/tasks/${task.id}/approve`)}>
            Approve
          </button>{' '}
          <button
            type="button"
            onClick={() =>
              void act(`/tasks/${task.id}/deny`, reason.trim() ? { reason: reason.trim() } : {})
            }
          >
            Deny
          </button>
        </form>
      )}
      {task.status === 'waiting' && approval === undefined && (
        <form
          class="answer"
          onSubmit={(e) => {
            e.preventDefault();
            if (answer.trim()) void act(`/tasks/${task.id}/resume`, { answer: answer.trim() });
          }}
        >
          <p class="question">{task.question}</p>
          <label for={answerId} class="visually-hidden">
            Answer
          </label>
          <textarea
            id={answerId}
            value={answer}
            rows={2}
            onInput={(e) => setAnswer(e.currentTarget.value)}
          />
          <button type="submit">Answer</button>{' '}
          <button type="button" onClick={() => void act(`/tasks/${task.id}/cancel`)}>
            Cancel task
          </button>
        </form>
      )}
      <ErrorNote error={error} />
    </li>
  );
}
