/**
 * Sessions, filtered by agent, status and mode, a page at a time. Each is
 * named by its title, or else by how it began (its first user message).
 */
import { useState } from 'preact/hooks';
import { useApi, useLoad, useLiveEvents } from '../lib/hooks';
import { href, onLinkClick } from '../lib/router';
import { formatTime, plural } from '../lib/format';
import { sessionLabel } from '../lib/session-list';
import type { Agent, Session } from '../lib/types';
import { ErrorNote } from './ErrorNote';

const PAGE_SIZE = 25;

export function SessionsView() {
  const api = useApi();
  const [agentName, setAgentName] = useState(
    () => new URLSearchParams(location.search).get('agentName') ?? '',
  );
  const [status, setStatus] = useState('');
  const [mode, setMode] = useState('');
  // The cursors of the pages before this one, so "Previous page" can go back.
  const [cursors, setCursors] = useState<(string | undefined)[]>([undefined]);
  const cursor = cursors[cursors.length - 1];
  const agents = useLoad(() => api.get<{ agents: Agent[] }>('/agents'), []);
  const page = useLoad(() => {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (agentName) query.set('agentName', agentName);
    if (status) query.set('status', status);
    if (mode) query.set('mode', mode);
    if (cursor) query.set('cursor', cursor);
    return api.get<{ sessions: Session[]; nextCursor: string | null }>(`/sessions?${query}`);
  }, [agentName, status, mode, cursor]);
  useLiveEvents(undefined, page.reload);
  const refilter = (set: (value: string) => void) => (e: Event) => {
    set((e.currentTarget as HTMLSelectElement).value);
    setCursors([undefined]);
  };

  return (
    <section class="main wide" aria-labelledby="sessions-title">
      <h2 id="sessions-title">Sessions</h2>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Agent
          <select value={agentName} onChange={refilter(setAgentName)}>
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
          <select value={status} onChange={refilter(setStatus)}>
            <option value="">all</option>
            <option value="active">active</option>
            <option value="closed">closed</option>
          </select>
        </label>
        <label>
          Mode
          <select value={mode} onChange={refilter(setMode)}>
            <option value="">all</option>
            <option value="chat">chat</option>
            <option value="task">task</option>
            <option value="subagent">subagent</option>
            <option value="daemon">daemon</option>
          </select>
        </label>
      </form>
      <ErrorNote error={page.error} />
      <SessionTable sessions={page.data?.sessions ?? []} />
      {page.data?.sessions.length === 0 && <p>No sessions match.</p>}
      <p class="pager">
        <button
          type="button"
          disabled={cursors.length === 1}
          onClick={() => setCursors(cursors.slice(0, -1))}
        >
          Previous page
        </button>{' '}
        <button
          type="button"
          disabled={!page.data?.nextCursor}
          onClick={() => page.data?.nextCursor && setCursors([...cursors, page.data.nextCursor])}
        >
          Next page
        </button>
      </p>
    </section>
  );
}

/** The list itself; on a narrow screen each row stacks into a card (labels from `data-label`). */
export function SessionTable({ sessions }: { sessions: readonly Session[] }) {
  return (
    <div class="table-wrap">
      <table class="sessions">
        <thead>
          <tr>
            <th scope="col">Session</th>
            <th scope="col">Agent</th>
            <th scope="col">Mode</th>
            <th scope="col">Status</th>
            <th scope="col">Messages</th>
            <th scope="col">Compactions</th>
            <th scope="col">Last active</th>
          </tr>
        </thead>
        <tbody>
          {sessions.map((s) => {
            const label = sessionLabel(s);
            return (
              <tr key={s.id}>
                <td data-label="Session">
                  <a href={href(`sessions/${s.id}`)} onClick={onLinkClick}>
                    <span class={`label label-${label.kind}`}>{label.text}</span>{' '}
                    <span class="session-id">{s.id}</span>
                  </a>
                </td>
                <td data-label="Agent">{s.agent_name}</td>
                <td data-label="Mode">{s.mode}</td>
                <td data-label="Status">{s.status}</td>
                <td data-label="Messages">{s.message_count}</td>
                <td
                  data-label="Compactions"
                  title={
                    s.compact_size > 0
                      ? `The summary covers ${plural(s.compact_size, 'message')}`
                      : undefined
                  }
                >
                  {s.compaction_count}
                </td>
                <td data-label="Last active">
                  <time dateTime={s.updated_at}>{formatTime(s.updated_at)}</time>
                  <span class="started">
                    {' '}
                    (started <time dateTime={s.created_at}>{formatTime(s.created_at)}</time>)
                  </span>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
