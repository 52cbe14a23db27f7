/**
 * An instance's pulse on a shared database (DESIGN §12): its `instances` row
 * is refreshed every few seconds, and each beat also sweeps for running tasks
 * whose owner stopped beating — an instance killed mid-task — and marks them
 * `interrupted` (resumable), closes the daemon sessions of its dead ticks,
 * and frees the daemon leases it held. A live peer's work is never touched: its heartbeat is fresh.
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

  constructor(private readonly options: InstanceHeartbeatOptions) {}

  get staleAfterMs(): number {
    return this.options.staleAfterMs ?? STALE_AFTER_MS;
  }

  /** Records the instance before it serves, then beats in the background. */
  async start(): Promise<void> {
    await this.options.store.heartbeatInstance(this.options.instanceId);
    this.timer = setInterval(() => {
      this.beating ??= this.beat().finally(() => (this.beating = undefined));
    }, this.options.heartbeatMs ?? HEARTBEAT_MS);
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
      if (this.failing) log({ instanceId }, 'instance heartbeat restored');
      this.failing = false;
    } catch (error) {
      // The database is away; the next beat tries again. Logged once per outage.
      if (!this.failing)
        log({ instanceId, error: (error as Error).message }, 'instance heartbeat failed');
      this.failing = true;
    }
  }
}
