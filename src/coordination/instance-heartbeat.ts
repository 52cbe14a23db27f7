/**
 * An instance's pulse on a shared database: its `instances` row is refreshed
 * every few seconds, and each beat also sweeps for running tasks whose owner
 * stopped beating — an instance killed mid-task — and marks them `interrupted`
 * (resumable), closes the daemon sessions of its dead ticks, and frees the
 * daemon leases it held. A live peer's work is never touched: its heartbeat is
 * fresh.
 */
import type { InstanceStore } from '../store/store.js';
import { recoverOrphanedWork } from '../runtime/startup-recovery.js';

/** How often an instance heartbeats (and sweeps). */
export const HEARTBEAT_MS = 2_000;
/** A heartbeat older than this means the instance is gone (several missed beats). */
export const STALE_AFTER_MS = 10_000;

export interface InstanceHeartbeatOptions {
  store: InstanceStore;
  instanceId: string;
  heartbeatMs?: number;
  staleAfterMs?: number;
  /** Tasks a sweep interrupted; and beats that failed (the database away). */
  log: (details: Record<string, unknown>, message: string) => void;
}

export class InstanceHeartbeat {
  private timer: NodeJS.Timeout | undefined;
  private beating: Promise<void> | undefined;
  private failing = false;
  /** Since when this instance's beats have landed without a gap (ms, this process's clock). */
  private beatingSince = 0;
  private lastBeat = 0;

  constructor(private readonly options: InstanceHeartbeatOptions) {}

  get staleAfterMs(): number {
    return this.options.staleAfterMs ?? STALE_AFTER_MS;
  }

  private get heartbeatMs(): number {
    return this.options.heartbeatMs ?? HEARTBEAT_MS;
  }

  /** Records the instance before it serves, then beats in the background. */
  async start(): Promise<void> {
    await this.options.store.heartbeatInstance(this.options.instanceId);
    this.beatingSince = this.lastBeat = Date.now();
    this.timer = setInterval(() => {
      this.beating ??= this.beat().finally(() => (this.beating = undefined));
    }, this.heartbeatMs);
    this.timer.unref();
  }

  /** Stops beating and removes the row: nothing of this instance runs any more. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
    await this.options.store.removeInstance(this.options.instanceId).catch(() => undefined);
  }

  private async beat(): Promise<void> {
    const { store, instanceId, log } = this.options;
    try {
      await store.heartbeatInstance(instanceId);
      const now = Date.now();
      // A gap in this instance's own beats (the database was away, or this
      // process was paused) means its peers could not beat either, or that
      // its view is stale: it sweeps only once every peer has had a stale
      // limit's time to beat again. A database outage alone then never
      // makes live peers interrupt each other's tasks.
      if (now - this.lastBeat > 2 * this.heartbeatMs) this.beatingSince = now;
      this.lastBeat = now;
      if (this.failing) log({ instanceId }, 'instance heartbeat restored');
      this.failing = false;
      if (now - this.beatingSince < this.staleAfterMs) return;
      const {
        closedDaemonSessions: closed,
        interruptedTasks: interrupted,
        releasedDaemonLeases: released,
      } = await recoverOrphanedWork(store, { self: instanceId, staleAfterMs: this.staleAfterMs });
      if (released > 0)
        log(
          { released },
          `${released} daemon lease(s) of an instance that stopped heartbeating freed`,
        );
      if (closed > 0)
        log(
          { closed },
          `${closed} daemon session(s) of an instance that stopped heartbeating closed`,
        );
      if (interrupted > 0)
        log(
          { interrupted },
          `${interrupted} task(s) of an instance that stopped heartbeating marked interrupted`,
        );
    } catch (error) {
      // The database is away; the next beat tries again. Logged once per outage.
      if (!this.failing)
        log({ instanceId, error: (error as Error).message }, 'instance heartbeat failed');
      this.failing = true;
    }
  }
}
