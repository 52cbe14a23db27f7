/**
 * One Postgres connection outside the pool, kept for the life of the
 * instance. Session-level advisory locks and LISTEN belong to a
 * connection, not to a transaction, so they need one that no pooled query
 * borrows; and when the instance dies, Postgres drops the connection and
 * frees everything tied to it. When the connection breaks while the
 * instance lives, it reconnects with backoff, LISTENs again on its owner's
 * channel, and tells its owner, which re-establishes the rest of its state or
 * gives up what went with it (the session locks). It names itself in
 * pg_stat_activity by instance and purpose, so an operator (or a test) can
 * tell an instance's lock connection from its event feed.
 */
import pg from 'pg';
import { prepared } from '../store/postgres/prepared.js';

/** What every owner of a dedicated connection is given: the database, and the instance it serves. */
export interface InstanceConnectionOptions {
  connectionString: string;
  instanceId: string;
  /** Backoff between reconnect attempts (ms); tests shorten it. */
  retryMs?: { first: number; max: number };
}

/** What the owner does with its connection. */
export interface ConnectionUse {
  /** Shown in pg_stat_activity as `cairn <instanceId> <purpose>`. */
  purpose: string;
  /** Channels to LISTEN on, on every (re)connect, before `onConnect`. */
  listen?: readonly string[];
  /** Runs on every (re)connect before the connection is handed out. */
  onConnect?: (client: pg.Client) => Promise<void>;
  /** The connection broke; locks and LISTENs tied to it are gone. */
  onLost?: (error: Error) => void;
  onNotification?: (message: pg.Notification) => void;
}

export class DedicatedConnection {
  private current: Promise<pg.Client> | undefined;
  private closed = false;
  private connected: pg.Client | undefined;
  /** The last statement handed to a connection: the next one on it waits for it to settle. */
  private queue: { client: pg.Client; last: Promise<unknown> } | undefined;

  constructor(
    private readonly instance: InstanceConnectionOptions,
    private readonly use: ConnectionUse,
  ) {}

  /** The live connection, connecting (with retries) first when there is none. */
  client(): Promise<pg.Client> {
    if (this.closed) return Promise.reject(new Error('connection closed'));
    this.current ??= this.connect();
    return this.current;
  }

  /**
   * Runs `text` (a named statement: these texts are few and fixed) on the
   * live connection, waiting for one first. Statements go out one at a time,
   * in the order asked — the owners rely on it (a lock is given back without
   * waiting, and this instance's next attempt on the session must come
   * after) — queued here rather than in the driver, which no longer takes a
   * query while another waits. One queued on a connection that breaks fails
   * with it; it is never sent on the next. A query whose `abandoned` signal
   * aborted while it waited is never sent: its caller has given up on it,
   * and it must not take effect behind the caller's back.
   */
  async query<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[] = [],
    abandoned?: AbortSignal,
  ): Promise<pg.QueryResult<R>> {
    const client = await this.client();
    const send = (): Promise<pg.QueryResult<R>> => {
      if (abandoned?.aborted) throw new Error('query abandoned before it was sent');
      return client.query<R>(prepared(text, values));
    };
    const before = this.queue?.client === client ? this.queue.last : undefined;
    const run = before === undefined ? Promise.resolve().then(send) : before.then(send);
    this.queue = { client, last: run.catch(() => undefined) };
    return run;
  }

  async close(): Promise<void> {
    this.closed = true;
    const current = this.current;
    this.current = undefined;
    if (!current) return;
    const client = await current.catch(() => undefined);
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<pg.Client> {
    const retry = this.instance.retryMs ?? { first: 200, max: 2_000 };
    let wait = retry.first;
    for (;;) {
      const client = new pg.Client({
        connectionString: this.instance.connectionString,
        application_name: `cairn ${this.instance.instanceId} ${this.use.purpose}`,
      });
      // A broken socket emits 'error'; without a listener Node would crash the process.
      client.on('error', (error) => this.lost(client, error));
      client.on('end', () => this.lost(client, new Error('connection ended')));
      if (this.use.onNotification) client.on('notification', this.use.onNotification);
      try {
        await client.connect();
        for (const channel of this.use.listen ?? []) await client.query(`LISTEN ${channel}`);
        await this.use.onConnect?.(client);
        if (this.closed) {
          await client.end().catch(() => undefined);
          throw new Error('connection closed');
        }
        this.connected = client;
        return client;
      } catch (error) {
        await client.end().catch(() => undefined);
        if (this.closed) throw error;
        await new Promise((resolve) => setTimeout(resolve, wait));
        wait = Math.min(wait * 2, retry.max);
      }
    }
  }

  private lost(client: pg.Client, error: Error): void {
    // Only the connection in use counts; a failed attempt is retried by connect().
    if (client !== this.connected) return;
    this.connected = undefined;
    this.current = undefined;
    if (this.closed) return;
    this.use.onLost?.(error);
    // Reconnect now, not at the next query: the LISTEN and what onConnect
    // re-establishes matter before anyone asks.
    this.client().catch(() => undefined);
  }
}
