/**
 * Daemons (agents with a `daemon` schedule) and their recent ticks: each tick
 * runs a task in a fresh `daemon` session. `daemon.tick` events say when the
 * next one is due.
 */
import { useState } from 'preact/hooks';
import { useApi, useLiveEvents, useLoad } from '../lib/hooks';
import { href, onLinkClick } from '../lib/router';
import type { Agent, Session, Task } from '../lib/types';
import { ErrorNote } from './ErrorNote';

const RECENT_TICKS = 5;
const RECENT_TASKS = 50;

interface Daemon {
  agent: Agent & { daemon: NonNullable<Agent['daemon']> };
  ticks: { session: Session; task: Task | undefined }[];
}

export function DaemonsView() {
  const api = useApi();
  const [nextRun, setNextRun] = useState<Record<string, string | null>>({});
  const daemons = useLoad(async (): Promise<Daemon[]> => {
    const { agents } = await api.get<{ agents: Agent[] }>('/agents');
    const scheduled = agents.filter((a): a is Daemon['agent'] => a.daemon !== undefined);
    return Promise.all(
      scheduled.map(async (agent) => {
        const name = encodeURIComponent(agent.name);
        const [{ sessions }, { tasks }] = await Promise.all([
          api.get<{ sessions: Session[] }>(
            `/sessions?agentName=${name}&mode=daemon&limit=${RECENT_TICKS}`,
          ),
          api.get<{ tasks: Task[] }>(`/tasks?agentName=${name}&limit=${RECENT_TASKS}`),
        ]);
        const bySession = new Map(tasks.map((t) => [t.session_id, t]));
        return { agent, ticks: sessions.map((s) => ({ session: s, task: bySession.get(s.id) })) };
      }),
    );
  }, []);
  useLiveEvents(undefined, daemons.reload, (event) => {
    if (event.event !== 'daemon.tick') return;
    const data = JSON.parse(event.data) as { agentName: string; nextRunAt: string | null };
    setNextRun((runs) => ({ ...runs, [data.agentName]: data.nextRunAt }));
  });
  return (
    <section class="main wide" aria-labelledby="daemons-title">
      <h2 id="daemons-title">Daemons</h2>
      <ErrorNote error={daemons.error} />
      {daemons.data?.length === 0 && <p>No agent has a daemon schedule.</p>}
      {(daemons.data ?? []).map(({ agent, ticks }) => {
        const next = nextRun[agent.name];
        return (
          <article key={agent.name} class="daemon" aria-labelledby={`daemon-${agent.name}`}>
            <h3 id={`daemon-${agent.name}`}>{agent.name}</h3>
            <p>
              Schedule: <code>{agent.daemon.every ?? agent.daemon.cron}</code>
              {next ? ` · next tick ${new Date(next).toLocaleString()}` : ''}
            </p>
            <p class="input">{agent.daemon.prompt}</p>
            <h4>Recent ticks</h4>
            <ul>
              {ticks.map(({ session, task }) => (
                <li key={session.id}>
                  {new Date(session.created_at).toLocaleString()} ·{' '}
                  <strong>{task?.status ?? session.status}</strong> ·{' '}
                  <a href={href(`sessions/${session.id}`)} onClick={onLinkClick}>
                    {session.id}
                  </a>
                  {task?.error ? ` · ${task.error}` : ''}
                </li>
              ))}
              {ticks.length === 0 && <li>No ticks yet.</li>}
            </ul>
          </article>
        );
      })}
    </section>
  );
}
