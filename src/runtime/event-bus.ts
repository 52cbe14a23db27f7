/**
 * The events bus: every event is appended to the `events` table (so
 * `GET /events` can replay it with `Last-Event-ID`) and then handed to live
 * subscribers.
 */
import type { EventLog, EventRow } from '../store/store.js';

export type EventListener = (event: EventRow) => void;

export class EventBus {
  private readonly listeners = new Set<EventListener>();
  /** In-process observers (the event log, metrics): not client streams, so not in subscriberCount. */
  private readonly observers = new Set<EventListener>();

  constructor(private readonly store: Pick<EventLog, 'appendEvent'>) {}

  async emit(
    type: string,
    sessionId: string | null,
    data: Record<string, unknown>,
  ): Promise<EventRow> {
    const event = await this.store.appendEvent({
      type,
      sessionId,
      data: { ...data, ...(sessionId ? { sessionId } : {}) },
    });
    this.publish([event]);
    return event;
  }

  /** Hands events that are already stored (e.g. with their messages) to live subscribers. */
  publish(events: readonly EventRow[]): void {
    for (const event of events) {
      for (const listener of [...this.observers, ...this.listeners]) {
        try {
          listener(event);
        } catch {
          // A broken subscriber must not break the turn that emitted the event.
        }
      }
    }
  }

  subscribe(listener: EventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Like `subscribe`, for the server's own observers (logging, metrics), for its whole life. */
  observe(listener: EventListener): void {
    this.observers.add(listener);
  }

  /** Live client subscriptions (open event streams). */
  get subscriberCount(): number {
    return this.listeners.size;
  }
}
