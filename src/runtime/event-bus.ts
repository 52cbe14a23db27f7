/**
 * The events bus: every event is appended to the `events` table (so
 * `GET /events` can replay it with `Last-Event-ID`) and then handed to live
 * subscribers. On a database shared by several instances subscribers
 * get every instance's events from a shared feed instead, in id order; this
 * instance's own events still reach its observers (log, metrics) at once.
 * The feed reads only while someone subscribes, so a subscriber that comes
 * when nobody did joins once the feed has caught up (`Subscription.live`).
 */
import type { EventLog, EventRow } from '../store/store.js';

export type EventListener = (event: EventRow) => void;

/** Where subscribers' events come from when instances share the database. */
export interface SharedFeed {
  /** Every event up to this id has been delivered to subscribers. */
  readonly watermark: number;
  /** Resolves once what committed before the call has been delivered. */
  catchUp(): Promise<void>;
}

export interface Subscription {
  /**
   * Resolves once the listener gets events: every event committed after
   * that, in id order. Read the history (the replay horizon) only then.
   */
  readonly live: Promise<void>;
  close(): void;
}

export class EventBus {
  private readonly listeners = new Set<EventListener>();
  /** Subscribers waiting for the shared feed to catch up before they join. */
  private readonly joining = new Set<EventListener>();
  /** While subscribers are joining: the catch-up they wait for. */
  private joined: Promise<void> | undefined;
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

  subscribe(listener: EventListener): Subscription {
    const close = (): void => {
      this.listeners.delete(listener);
      this.joining.delete(listener);
    };
    // A feed with subscribers reads every commit: a newcomer joins at once.
    if (!this.sharedFeed || this.listeners.size > 0) {
      this.listeners.add(listener);
      return { live: Promise.resolve(), close };
    }
    this.joining.add(listener);
    return { live: this.joined ?? this.joinAfterCatchUp(this.sharedFeed), close };
  }

  private joinAfterCatchUp(feed: SharedFeed): Promise<void> {
    this.joined = feed.catchUp().then(() => {
      for (const listener of this.joining) this.listeners.add(listener);
      this.joining.clear();
      this.joined = undefined;
    });
    return this.joined;
  }

  /** Whether the shared feed must read what commits: someone subscribes, or is joining. */
  get following(): boolean {
    return this.listeners.size > 0 || this.joining.size > 0;
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
