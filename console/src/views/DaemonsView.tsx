/** Daemons (agents with a schedule) and their recent ticks (each tick runs a task). */
import { useApi, useLiveEvents, useLoad } from '../lib/hooks';
import { href, onLinkClick } from '../lib/router';
import type { Agent, Task } from '../lib/types';
import { ErrorNote } from './ErrorNote';

const RECENT_TICKS = 5;

export function DaemonsView() {
  const api = useApi();
  const daemons = useLoad(async () => {
    const { agents } = await api.get<{ agents: Agent[] }>('/agents');
    const scheduled = agents.filter((a) => a.schedule !== undefined && a.schedule !== null);
    return Promise.all(
      scheduled.map(async (agent) => ({
        agent,
        ticks: (
          await api.get<{ tasks: Task[] }>(
            `/tasks?agentName=${encodeURIComponent(agent.name)}&limit=${RECENT_TICKS}`,
          )
        ).tasks,
      })),
    );
  }, []);
  useLiveEvents(undefined, daemons.reload);
  return (
    <section class="main wide" aria-labelledby="daemons-title">
      <h2 id="daemons-title">Daemons</h2>
      <ErrorNote error={daemons.error} />
      {daemons.data?.length === 0 && <p>No agent has a schedule.</p>}
      {(daemons.data ?? []).map(({ agent, ticks }) => (
        <article key={agent.name} class="daemon">
          <h3>{agent.name}</h3>
          <p>
            Schedule: <code>{JSON.stringify(agent.schedule)}</code>
          </p>
          <h4>Recent ticks</h4>
          <ul>
            {ticks.map((t) => (
              <li key={t.id}>
                {new Date(t.created_at).toLocaleString()} · <strong>{t.status}</strong> ·{' '}
                <a href={href(`sessions/${t.session_id}`)} onClick={onLinkClick}>
                  {t.session_id}
                </a>
                {t.error ? ` · ${t.error}` : ''}
              </li>
            ))}
            {ticks.length === 0 && <li>No ticks yet.</li>}
          </ul>
        </article>
      ))}
    </section>
  );
}
