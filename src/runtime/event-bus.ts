/**
 * The events bus: every event is appended to the `events` table (so
 * `GET /events` can replay it with `Last-Event-ID`) and then handed to live
 * subscribers. On a database shared by several instances subscribers
 * get every instance's events from a shared feed instead, in id order; this
 * instance's own events still reach its observers (log, metrics) at once.
 */
import type { EventLog, EventRow } from '../store/store.js';

export type EventListener = (event: EventRow) => void;

/** Where subscribers' events come from when instances share the database. */
export interface SharedFeed {
  /** Every event up to this id has been delivered to subscribers. */
  readonly watermark: number;
}

export class EventBus {
  private readonly listeners = new Set<EventListener>();
  /** In-process observers (the event log, metrics): not client streams, so not in subscriberCount. */
  private readonly observers = new Set<EventListener>();

  private sharedFeed: SharedFeed | undefined;

  constructor(private readonly store: Pick<EventLog, 'appendEvent'>) {}

  /** From now on subscribers get events only through `deliverShared`, from `feed`. */
  useSharedFeed(feed: SharedFeed): void {
    this.sharedFeed = feed;
  }

  /**
   * The highest event id a replay from the store may send before the live
   * feed takes over: everything, unless a shared feed has not yet delivered
   * past a missing (uncommitted) id.
   */
  replayHorizon(): number {
    return this.sharedFeed?.watermark ?? Number.MAX_SAFE_INTEGER;
  }

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
    const targets = this.sharedFeed ? this.observers : [...this.observers, ...this.listeners];
    for (const event of events) notify(targets, event);
  }

  /** Events of every instance, in id order, from the shared feed: to subscribers only. */
  deliverShared(events: readonly EventRow[]): void {
    for (const event of events) notify(this.listeners, event);
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

function notify(listeners: Iterable<EventListener>, event: EventRow): void {
  for (const listener of listeners) {
    try {
      listener(event);
    } catch {
      // A broken subscriber must not break the turn that emitted the event.
    }
  }
}
