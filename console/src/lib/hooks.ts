/** Shared hooks: the API in context, loading data, following live events, following the newest message. */
import { createContext } from 'preact';
import { useCallback, useContext, useEffect, useRef, useState } from 'preact/hooks';
import type { Api } from './api';
import { BottomFollower } from './follow-bottom';
import { followEvents, type SseEvent } from './sse';

export const ApiContext = createContext<Api | null>(null);

/** Whether the console's key is the admin's: a client key has no memory or keys pages. */
export const RoleContext = createContext<'admin' | 'client'>('admin');

export function useApi(): Api {
  const api = useContext(ApiContext);
  if (!api) throw new Error('useApi outside ApiContext');
  return api;
}

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  reload: () => void;
}

/** Loads `load()` now and whenever `reload` is called or `deps` change; keeps the last data while reloading. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    load().then(
      (value) => {
        if (!live) return;
        setData(value);
        setError(undefined);
      },
      (err: unknown) => live && setError((err as Error).message),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]); // callers pass the deps of `load`
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { data, error, reload };
}

const LAST_EVENT_KEY = 'cairn.lastEventId';
const REFRESH_DEBOUNCE_MS = 150;

/**
 * Follows `GET /events` (optionally one session's) while the view is open and
 * calls `onEvent` for each event; `refresh` is called once per burst. The last
 * event id is remembered for the tab, so switching views resumes the log
 * instead of replaying it.
 */
export function useLiveEvents(
  sessionId: string | undefined,
  refresh: () => void,
  onEvent?: (event: SseEvent) => void,
): 'live' | 'reconnecting' | 'connecting' {
  const api = useApi();
  const [state, setState] = useState<'live' | 'reconnecting' | 'connecting'>('connecting');
  const latest = useRef({ refresh, onEvent });
  latest.current = { refresh, onEvent };
  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stop = followEvents({
      url: sessionId ? `/events?sessionId=${encodeURIComponent(sessionId)}` : '/events',
      headers: () => api.headers(),
      lastEventId: sessionStorage.getItem(LAST_EVENT_KEY) ?? undefined,
      onState: setState,
      onUnauthorized: () => void api.get('/agents').catch(() => undefined),
      onEvent: (event) => {
        if (event.id !== undefined) {
          const seen = Number(sessionStorage.getItem(LAST_EVENT_KEY) ?? '0');
          if (Number(event.id) > seen) sessionStorage.setItem(LAST_EVENT_KEY, event.id);
        }
        latest.current.onEvent?.(event);
        clearTimeout(timer);
        timer = setTimeout(() => latest.current.refresh(), REFRESH_DEBOUNCE_MS);
      },
    });
    return () => {
      clearTimeout(timer);
      stop();
    };
  }, [api, sessionId]);
  return state;
}

/**
 * Keeps the page at its bottom while the reader is there and the element
 * behind `target` grows or shrinks (see `BottomFollower`). Starts once
 * `ready` is true, when the element is on the page.
 */
export function useFollowBottom(target: { current: Element | null }, ready: boolean): void {
  useEffect(() => {
    const element = target.current;
    if (!ready || !element) return;
    const page = document.documentElement;
    const view = () => ({
      scrollTop: page.scrollTop,
      clientHeight: page.clientHeight,
      scrollHeight: page.scrollHeight,
    });
    const follower = new BottomFollower();
    const onScroll = () => follower.scrolled(view());
    const observer = new ResizeObserver(() => {
      const top = follower.resized(view());
      if (top !== undefined) window.scrollTo({ top });
    });
    observer.observe(element);
    window.addEventListener('scroll', onScroll, { passive: true });
    return () => {
      observer.disconnect();
      window.removeEventListener('scroll', onScroll);
    };
  }, [target, ready]);
}
