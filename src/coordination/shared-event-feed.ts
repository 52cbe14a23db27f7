/**
 * Every instance's events, in id order, for this instance's client streams
 * (`GET /events` on any instance streams turns run on any other). Each insert
 * into `events` notifies `cairn_events` when it commits (migration 006); the
 * notification only wakes the feed, which then reads the rows after its
 * watermark from the store. A slow poll covers a notification lost while the
 * listening connection was down.
 *
 * Ids come from a sequence, handed out at insert but committed in any order:
 * a reader that saw id 12 may later see 11 commit. So the feed delivers only
 * without gaps: it stops before a missing id and re-reads shortly, and only
 * when an id stays missing for `gapGraceMs` (a rolled-back insert leaves a
 * hole forever) does it step over it. Streams then see ids only increase, and
 * a client resuming with Last-Event-ID misses nothing.
 *
 * Nobody on this instance may be listening (no open stream: the usual case
 * for an instance serving turns). Then a notification reads nothing; the
 * poll alone keeps the watermark within a second of the newest event, and
 * the first subscriber waits for one read (`catchUp`) before it joins. A
 * read on every commit, on every instance, was a tenth to a fifth of a
 * Postgres turn.
 */
import type { EventLog, EventRow } from '../store/store.js';
import { DedicatedConnection, type InstanceConnectionOptions } from './dedicated-connection.js';

export const EVENTS_CHANNEL = 'cairn_events';
const PAGE = 500;
/** How long a missing id may stay missing before it is taken for a hole. */
export const GAP_GRACE_MS = 3_000;
/** How soon the feed re-reads while it waits on a missing id. */
const GAP_RECHECK_MS = 25;
/** The poll behind the notifications. */
const POLL_MS = 1_000;

export interface SharedEventFeedOptions extends InstanceConnectionOptions {
  store: Pick<EventLog, 'listEvents'>;
  /** Hands events, in id order and each once, to the local streams. */
  deliver: (events: readonly EventRow[]) => void;
  /** Whether anyone here takes the events: if not, notifications are left to the poll. Always, unless given. */
  listening?: () => boolean;
  gapGraceMs?: number;
  pollMs?: number;
  log?: (details: Record<string, unknown>, message: string) => void;
}

export class SharedEventFeed {
  /** Events up to the newest at start are history (a stream replays them from the store). */
  private delivered = 0;
  private started = false;
  private gap: { after: number; since: number } | undefined;
  private reading: Promise<void> | undefined;
  private again = false;
  /** `catchUp` callers waiting for the next read to start, and end. */
  private waiting: (() => void)[] = [];
  private recheck: NodeJS.Timeout | undefined;
  private poll: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly connection: DedicatedConnection;

  constructor(private readonly options: SharedEventFeedOptions) {
    this.connection = new DedicatedConnection(options, {
      purpose: 'events',
      listen: [EVENTS_CHANNEL],
      // Whatever committed while the connection was down.
      onConnect: async () => this.read(),
      onNotification: () => {
        if (options.listening?.() !== false) this.read();
      },
      onLost: (error) =>
        options.log?.({ error: error.message }, 'event feed connection lost; reconnecting'),
    });
  }

  /**
   * The highest id up to which every event has been delivered (or was
   * history at start): a replay from the store may go this far and no
   * further, and the live feed carries on from there.
   */
  get watermark(): number {
    return this.delivered;
  }

  async start(): Promise<void> {
    const { rows } = await this.connection.query<{ id: string }>(
      'SELECT coalesce(max(id), 0)::text AS id FROM events',
    );
    this.delivered = Number(rows[0]?.id ?? 0);
    this.started = true;
    this.poll = setInterval(() => this.read(), this.options.pollMs ?? POLL_MS);
    this.poll.unref();
  }

  /**
   * Resolves after a read that started after the call: everything committed
   * before it has been delivered (but an event held back behind a missing
   * id, or when the read failed). A subscriber joining then gets only what
   * commits after it joined.
   */
  catchUp(): Promise<void> {
    if (this.closed || !this.started) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.read();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.poll);
    clearTimeout(this.recheck);
    await this.reading;
    await this.connection.close();
    for (const resolve of this.waiting.splice(0)) resolve();
  }

  /** Reads what is new; one read at a time, and one more if asked during it. */
  private read(): void {
    if (this.closed || !this.started) return;
    if (this.reading) {
      this.again = true;
      return;
    }
    const waiting = this.waiting.splice(0);
    this.reading = this.readNew()
      .catch((error: unknown) =>
        this.options.log?.({ error: (error as Error).message }, 'event feed read failed'),
      )
      .finally(() => {
        this.reading = undefined;
        for (const resolve of waiting) resolve();
        if (this.again) {
          this.again = false;
          this.read();
        }
      });
  }

  private async readNew(): Promise<void> {
    const grace = this.options.gapGraceMs ?? GAP_GRACE_MS;
    for (;;) {
      const rows = await this.options.store.listEvents({ afterId: this.delivered, limit: PAGE });
      const ready: EventRow[] = [];
      let waiting = false;
      for (const row of rows) {
        if (row.id !== this.delivered + 1) {
          const now = Date.now();
          if (this.gap?.after !== this.delivered) this.gap = { after: this.delivered, since: now };
          if (now - this.gap.since < grace) {
            waiting = true;
            break;
          }
        }
        ready.push(row);
        this.delivered = row.id;
      }
      if (ready.length > 0) this.options.deliver(ready);
      if (waiting) {
        // An earlier id has not committed yet (or never will): look again soon.
        clearTimeout(this.recheck);
        this.recheck = setTimeout(() => this.read(), GAP_RECHECK_MS);
        return;
      }
      if (rows.length < PAGE) return;
    }
  }
}
