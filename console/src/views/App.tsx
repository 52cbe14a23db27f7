/**
 * The console shell: asks for the API key when the server wants one, then
 * shows the navigation and the routed view.
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { Api, ApiError } from '../lib/api';
import { ApiContext, RoleContext } from '../lib/hooks';
import { NewChatView } from './NewChatView';
import { href, onLinkClick, useRoute, type Route } from '../lib/router';
import { AgentsView } from './AgentsView';
import { DaemonsView } from './DaemonsView';
import { KeyPrompt } from './KeyPrompt';
import { KeysView } from './KeysView';
import { SessionsView } from './SessionsView';
import { SessionView } from './SessionView';
import { TasksView } from './TasksView';

type Access = 'checking' | 'needs-key' | 'wrong-key' | 'open';

/** Whether the console's key is the admin's: only the admin sees the keys page. */
type Role = 'admin' | 'client';

export function App() {
  const [access, setAccess] = useState<Access>('checking');
  const [role, setRole] = useState<Role>('client');
  const api = useMemo(
    () =>
      new Api({
        storage: sessionStorage,
        onUnauthorized: () => setAccess(api.key ? 'wrong-key' : 'needs-key'),
      }),
    [],
  );
  const check = () => {
    // GET /keys answers the admin only (403 to a client key), so it tells the role too.
    api.get('/keys').then(
      () => setRole('admin'),
      () => setRole('client'),
    );
    api.get('/agents').then(
      () => setAccess('open'),
      (err: unknown) => {
        if (!(err instanceof ApiError) || err.status !== 401) setAccess('open');
      },
    );
  };
  useEffect(check, [api]);
  const route = useRoute();

  if (access === 'checking') return <p class="loading">Loading…</p>;
  if (access !== 'open') {
    return (
      <KeyPrompt
        wrong={access === 'wrong-key'}
        onSubmit={(key) => {
          api.setKey(key);
          check();
        }}
      />
    );
  }
  return (
    <RoleContext.Provider value={role}>
      <ApiContext.Provider value={api}>
        <header class="top">
          <h1>
            <a href="/" onClick={onLinkClick}>
              Cairn
            </a>
          </h1>
          <nav aria-label="Main">
            <NavLink route={route} view="agents" to={href('agents')} label="Agents" />
            <NavLink route={route} view="sessions" to={href('sessions')} label="Sessions" />
            <NavLink route={route} view="tasks" to={href('tasks')} label="Tasks" />
            <NavLink route={route} view="daemons" to={href('daemons')} label="Daemons" />
            {role === 'admin' && (
              <NavLink route={route} view="keys" to={href('keys')} label="Keys" />
            )}
          </nav>
        </header>
        <main>
          <View route={route} />
        </main>
      </ApiContext.Provider>
    </RoleContext.Provider>
  );
}

function NavLink(props: { route: Route; view: Route['view']; to: string; label: string }) {
  const current =
    props.route.view === props.view ||
    (props.view === 'sessions' && props.route.view === 'session');
  return (
    <a href={props.to} onClick={onLinkClick} aria-current={current ? 'page' : undefined}>
      {props.label}
    </a>
  );
}

function View({ route }: { route: Route }) {
  switch (route.view) {
    case 'agents':
      return <AgentsView selected={route.agent} />;
    case 'new-chat':
      return <NewChatView key={route.agent} agentName={route.agent} />;
    case 'sessions':
      return <SessionsView />;
    case 'session':
      return <SessionView key={route.id} id={route.id} />;
    case 'tasks':
      return <TasksView />;
    case 'daemons':
      return <DaemonsView />;
    case 'keys':
      return <KeysView />;
  }
}
