/**
 * Tasks: their status, and for a waiting task its question with a box to
 * answer it, or the tool call it waits on with Approve and Deny.
 */
import { useState } from 'preact/hooks';
import { useApi, useLiveEvents, useLoad } from '../lib/hooks';
import { href, onLinkClick } from '../lib/router';
import type { Task } from '../lib/types';
import { ErrorNote } from './ErrorNote';

export function TasksView() {
  const api = useApi();
  const [status, setStatus] = useState('');
  const tasks = useLoad(
    () => api.get<{ tasks: Task[] }>(`/tasks?limit=50${status ? `&status=${status}` : ''}`),
    [status],
  );
  useLiveEvents(undefined, tasks.reload);
  return (
    <section class="main wide" aria-labelledby="tasks-title">
      <h2 id="tasks-title">Tasks</h2>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Status
          <select value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            <option value="">all</option>
            {['running', 'waiting', 'completed', 'failed', 'cancelled', 'interrupted'].map((s) => (
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
        {tasks.data?.tasks.length === 0 && <li>No tasks.</li>}
      </ul>
    </section>
  );
}

function TaskItem({ task, onChange }: { task: Task; onChange: () => void }) {
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
      <p class="input">{task.input}</p>
      {task.result && <p class="result">{task.result}</p>}
      {task.error && <p class="error">{task.error}</p>}
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
