/**
 * Logs the server's lifecycle events once each, at info, with their ids:
 * task transitions, daemon ticks, compactions, session lifecycle. Message
 * events are left out (a turn logs through its HTTP request line), so a busy
 * server's log stays readable.
 */
import type { EventRow } from '../store/store.js';
import type { EventListener } from './event-bus.js';

export type InfoLogger = (details: Record<string, unknown>, message: string) => void;

/** Event types that are logged; everything else (message.created, …) is not. */
const LOGGED_PREFIXES = ['task.', 'daemon.', 'context.', 'session.', 'agents.'];

/** An event listener that logs lifecycle events through `info`. */
export function eventLogger(info: InfoLogger): EventListener {
  return (event: EventRow) => {
    if (!LOGGED_PREFIXES.some((prefix) => event.type.startsWith(prefix))) return;
    info({ event: event.type, eventId: event.id, ...idsAndCounts(event.data) }, event.type);
  };
}

/**
 * Ids, names, counts and the trigger, never free text: a question or an error
 * text may carry what a user typed, which does not belong in an info log.
 */
function idsAndCounts(data: Record<string, unknown>): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(data)) {
    if (typeof value === 'number' || typeof value === 'boolean') kept[key] = value;
    else if (typeof value === 'string' && /(Id|Name)$|^(trigger|status)$/.test(key))
      kept[key] = value;
  }
  return kept;
}
