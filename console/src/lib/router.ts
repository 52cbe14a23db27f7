/**
 * A tiny history router. The console's pages live under /console/ so they
 * never collide with API paths (`/sessions/:id` is JSON); `/` is the home page.
 */
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { view: 'agents'; agent?: string }
  | { view: 'new-chat'; agent: string }
  | { view: 'sessions' }
  | { view: 'session'; id: string }
  | { view: 'tasks' }
  | { view: 'daemons' }
  | { view: 'keys' };

export function parseRoute(path: string): Route {
  const parts = path
    .replace(/^\/console\/?/, '')
    .split('/')
    .filter(Boolean)
    .map(decodeURIComponent);
  switch (parts[0]) {
    case 'sessions':
      return parts[1] ? { view: 'session', id: parts[1] } : { view: 'sessions' };
    case 'tasks':
      return { view: 'tasks' };
    case 'daemons':
      return { view: 'daemons' };
    case 'keys':
      return { view: 'keys' };
    case 'agents':
      if (parts[1] && parts[2] === 'chat') return { view: 'new-chat', agent: parts[1] };
      return parts[1] ? { view: 'agents', agent: parts[1] } : { view: 'agents' };
    default:
      return { view: 'agents' };
  }
}

export function href(path: string): string {
  return `/console/${path}`;
}

const listeners = new Set<() => void>();

export function navigate(to: string): void {
  history.pushState(null, '', to);
  for (const listener of listeners) listener();
}

export function useRoute(): Route {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const update = () => setPath(location.pathname);
    listeners.add(update);
    addEventListener('popstate', update);
    return () => {
      listeners.delete(update);
      removeEventListener('popstate', update);
    };
  }, []);
  return parseRoute(path);
}

/** An in-app link: a real <a href> (keyboard, middle click) that routes without reloading. */
export function onLinkClick(event: MouseEvent): void {
  const target = event.currentTarget as HTMLAnchorElement;
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  event.preventDefault();
  navigate(target.getAttribute('href') ?? '/');
}
