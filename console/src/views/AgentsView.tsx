/**
 * Agents: their model and settings, their memory notes (add, delete), and a
 * way to start a chat; an unknown agent's page says so and offers nothing.
 */
import { useContext, useState } from 'preact/hooks';
import { RoleContext, useApi, useLoad, useLiveEvents } from '../lib/hooks';
import { agentSettingRows, hasMemoryTool } from '../lib/agent-settings';
import { href, navigate, onLinkClick } from '../lib/router';
import type { Agent, MemoryNote } from '../lib/types';
import { ErrorNote } from './ErrorNote';

export function AgentsView({ selected }: { selected: string | undefined }) {
  const api = useApi();
  const agents = useLoad(() => api.get<{ agents: Agent[] }>('/agents'), []);
  const list = agents.data?.agents ?? [];
  const name = selected ?? list[0]?.name;
  return (
    <div class="split">
      <nav aria-label="Agents" class="side">
        <h2>Agents</h2>
        <ErrorNote error={agents.error} />
        <ul>
          {list.map((a) => (
            <li key={a.name}>
              <a
                href={href(`agents/${encodeURIComponent(a.name)}`)}
                onClick={onLinkClick}
                aria-current={a.name === name ? 'page' : undefined}
              >
                {a.name}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      {name && <AgentPage agents={agents.data?.agents} name={name} failed={!!agents.error} />}
    </div>
  );
}

/**
 * The page of agent `name` once the list is in: its details, or, for a name
 * the server does not know (or this key may not see), a page that says so
 * and offers nothing to act on.
 */
export function AgentPage(props: { agents: Agent[] | undefined; name: string; failed?: boolean }) {
  if (!props.agents) {
    // The list's error is shown beside it; nothing to say here until it loads.
    return props.failed ? null : (
      <section class="main">
        <p>Loading…</p>
      </section>
    );
  }
  const agent = props.agents.find((a) => a.name === props.name);
  if (!agent) return <UnknownAgent name={props.name} />;
  return <AgentDetail key={agent.name} agent={agent} />;
}

function UnknownAgent({ name }: { name: string }) {
  return (
    <section class="main" aria-labelledby="agent-title">
      <h2 id="agent-title">No agent named “{name}”</h2>
      <p>
        The server has no such agent, or this key may not use it. Pick one from the list, or see{' '}
        <a href={href('agents')} onClick={onLinkClick}>
          all agents
        </a>
        .
      </p>
    </section>
  );
}

/** The agent's model and settings, one labelled line each, and its system prompt folded. */
export function AgentSettings({ agent }: { agent: Agent }) {
  return (
    <section class="agent-settings" aria-labelledby="agent-settings-title">
      <h3 id="agent-settings-title">Settings</h3>
      <dl class="settings">
        {agentSettingRows(agent).map((row) => (
          <div key={row.label}>
            <dt>{row.label}</dt>
            <dd>{row.value}</dd>
          </div>
        ))}
      </dl>
      {agent.system && (
        <details>
          <summary>System prompt</summary>
          <pre>{agent.system}</pre>
        </details>
      )}
    </section>
  );
}

function AgentDetail({ agent }: { agent: Agent }) {
  const { name } = agent;
  const api = useApi();
  const [error, setError] = useState<string>();
  // Memory is the admin's: a client key's console does not ask for it.
  const admin = useContext(RoleContext) === 'admin';
  const notes = useLoad(
    () =>
      admin
        ? api.get<{ notes: MemoryNote[] }>(`/agents/${encodeURIComponent(name)}/memory`)
        : Promise.resolve({ notes: [] }),
    [name, admin],
  );
  useLiveEvents(undefined, notes.reload);
  const [key, setKey] = useState('');
  const [content, setContent] = useState('');
  const memoryUrl = (k: string) =>
    `/agents/${encodeURIComponent(name)}/memory/${encodeURIComponent(k)}`;

  const addNote = async (e: Event) => {
    e.preventDefault();
    try {
      await api.put(memoryUrl(key.trim()), { content });
      setKey('');
      setContent('');
      notes.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const deleteNote = async (k: string) => {
    try {
      await api.delete(memoryUrl(k));
      notes.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };

  return (
    <section class="main" aria-labelledby="agent-title">
      <h2 id="agent-title">{name}</h2>
      {agent.description && <p class="description">{agent.description}</p>}
      <p>
        {/* The session is made with the first message: opening a chat and leaving makes none. */}
        <button
          type="button"
          onClick={() => navigate(href(`agents/${encodeURIComponent(name)}/chat`))}
        >
          New chat
        </button>{' '}
        <a href={href(`sessions?agentName=${encodeURIComponent(name)}`)} onClick={onLinkClick}>
          Sessions of {name}
        </a>
      </p>
      <ErrorNote error={error} />
      <AgentSettings agent={agent} />
      {admin && (
        <>
          <h3>Memory notes</h3>
          {!agent.memory?.enabled && (
            <p class="memory-off" role="note">
              Memory is off for this agent: these notes are kept, but the model is not given them
              {hasMemoryTool(agent) ? ' (it can search them with the memory tool)' : ''}. Set{' '}
              <code>"memory": {'{"enabled": true}'}</code> in its agent.json to give them.
            </p>
          )}
          <ErrorNote error={notes.error} />
          <ul class="notes">
            {(notes.data?.notes ?? []).map((n) => (
              <li key={n.key}>
                <strong>{n.key}</strong>: {n.content}{' '}
                <button
                  type="button"
                  aria-label={`Delete note ${n.key}`}
                  onClick={() => void deleteNote(n.key)}
                >
                  Delete
                </button>
              </li>
            ))}
            {notes.data?.notes.length === 0 && <li>No notes.</li>}
          </ul>
          <form class="note-form" onSubmit={(e) => void addNote(e)}>
            <label>
              Key
              <input
                value={key}
                required
                pattern="\S+"
                onInput={(e) => setKey(e.currentTarget.value)}
              />
            </label>
            <label>
              Note
              <textarea
                value={content}
                required
                onInput={(e) => setContent(e.currentTarget.value)}
              />
            </label>
            <button type="submit">Add note</button>
          </form>
        </>
      )}
    </section>
  );
}
