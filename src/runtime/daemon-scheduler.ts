/**
 * Daemon agents: an agent with `daemon.every` or `daemon.cron` runs its
 * prompt as a task in a fresh session (mode `daemon`) on schedule, then the
 * session is closed. Ticks of one agent never overlap (an in-process flag plus
 * a lease row, so two processes on one database do not both fire); after a
 * restart, missed slots give at most one catch-up tick. A reload of the
 * agents is applied with `sync`: new daemons are scheduled, removed ones
 * unscheduled, changed schedules rescheduled.
 *
 * `every` is timed from the start of a slot, not from the end of its tick: a
 * 10-minute daemon whose tick takes 3 minutes still ticks every 10 minutes. A
 * tick that runs past its next slots never overlaps the next one: the slots it
 * ran over are skipped, and said once, at warn, by the instance whose tick
 * overran (no instance ran them). Instances sharing a database all arm every
 * slot and one claims it; the others' skips are routine, logged at debug.
 */
import { randomUUID } from 'node:crypto';
import { Cron } from 'croner';
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { DaemonLeaseStore, TaskRow } from '../store/store.js';
import type { EventBus } from './event-bus.js';
import type { Sessions } from './sessions.js';
import { parseEvery } from './duration.js';
import type { TaskRunner } from './task-runner.js';

/** A tick holds its agent's lease this long at most; a crashed holder's lease then expires. */
export const DAEMON_LEASE_MS = 15 * 60_000;
/** setTimeout cannot wait longer than this; longer waits are re-armed. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What a daemon is scheduled by (`every 10m`, `cron 0 9 * * 1-5`); undefined for no daemon. */
export function scheduleOf(agent: AgentConfig): string | undefined {
  const daemon = agent.daemon;
  if (daemon?.every !== undefined) return `every ${daemon.every}`;
  if (daemon?.cron !== undefined) return `cron ${daemon.cron}`;
  return undefined;
}

/** The next time `agent`'s daemon is due after `from`. */
export function nextRunAfter(agent: AgentConfig, from: Date): Date | null {
  const daemon = agent.daemon;
  if (!daemon) return null;
  if (daemon.every !== undefined) return new Date(from.getTime() + parseEvery(daemon.every));
  if (daemon.cron !== undefined) return new Cron(daemon.cron, { paused: true }).nextRun(from);
  return null;
}

/** Past this many skipped cron slots the count stops (the next slot is still exact). */
const MAX_COUNTED_SLOTS = 1_000;

/**
 * The first slot of `agent`'s schedule after the slot `base` that is still
 * ahead at `now`, and how many slots between them are already past (lost: a
 * tick that ran over them, or started late). `every` slots are `base` plus
 * whole intervals, so the schedule keeps its phase whatever a tick took.
 */
export function nextSlot(
  agent: AgentConfig,
  base: Date,
  now: Date,
): { next: Date | null; skipped: number } {
  const every = agent.daemon?.every;
  if (every !== undefined) {
    const intervalMs = parseEvery(every);
    const behindMs = now.getTime() - base.getTime();
    const steps = behindMs < 0 ? 1 : Math.floor(behindMs / intervalMs) + 1;
    return { next: new Date(base.getTime() + steps * intervalMs), skipped: steps - 1 };
  }
  let next = nextRunAfter(agent, base);
  let skipped = 0;
  while (next !== null && next <= now) {
    if (++skipped >= MAX_COUNTED_SLOTS) return { next: nextRunAfter(agent, now), skipped };
    next = nextRunAfter(agent, next);
  }
  return { next, skipped };
}

export interface DaemonSchedulerDeps {
  /** A tick's session is closed once its task is done. */
  sessions: Pick<Sessions, 'close'>;
  agents: Pick<AgentRegistry, 'get' | 'list'>;
  store: DaemonLeaseStore;
  events: EventBus;
  tasks: Pick<TaskRunner, 'runTask' | 'wait' | 'cancelTask'>;
  clock?: () => Date;
  /** Problems: an invalid schedule, a lost slot, a failed tick. */
  log?: (details: Record<string, unknown>, message: string) => void;
  /** Routine: a slot another instance claimed first, a tick that found one still running. */
  debug?: (details: Record<string, unknown>, message: string) => void;
  /** What changed: a daemon scheduled, rescheduled or unscheduled by a reload. */
  info?: (details: Record<string, unknown>, message: string) => void;
  /** Who holds the tick leases: the instance id, so a dead instance's leases can be freed. */
  owner?: string;
}

export class DaemonScheduler {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  /**
   * The schedule (`scheduleOf`) each daemon is armed with. A timer or a tick
   * armed under another schedule, or for a daemon since removed, re-arms nothing.
   */
  private readonly armed = new Map<string, string>();
  private readonly ticking = new Map<string, Promise<TaskRow | undefined>>();
  /** Daemons whose last tick reached their budget, with the limits it reached. */
  private readonly spent = new Map<string, { limits: AgentConfig['limits']; told: boolean }>();
  private readonly owner: string;
  private readonly clock: () => Date;
  private stopped = false;
  private started = false;
  /** `start` and each `sync` run one after another, so two never arm the same daemon. */
  private applying: Promise<void> = Promise.resolve();

  constructor(private readonly deps: DaemonSchedulerDeps) {
    this.clock = deps.clock ?? (() => new Date());
    this.owner = deps.owner ?? `cairn-${randomUUID()}`;
  }

  /** Agents that have a valid schedule; a bad cron expression is logged and skipped. */
  daemonAgents(): AgentConfig[] {
    return this.deps.agents.list().filter((agent) => {
      if (!agent.daemon) return false;
      try {
        nextRunAfter(agent, this.clock());
        return true;
      } catch (err) {
        this.deps.log?.(
          { agent: agent.name, error: (err as Error).message },
          'daemon schedule is invalid; not scheduled',
        );
        return false;
      }
    });
  }

  /**
   * Schedules every daemon agent; runs one catch-up tick for those that missed
   * slots. Resolves once every agent's next run is stored, so nothing of the
   * start-up writes can land after (and overwrite) what a first tick records.
   */
  start(): Promise<void> {
    return this.serially(async () => {
      const now = this.clock();
      for (const agent of this.daemonAgents()) {
        this.armed.set(agent.name, scheduleOf(agent)!);
        const state = await this.deps.store.findDaemonState(agent.name);
        const due = state?.next_run_at ? new Date(state.next_run_at) : null;
        if (due !== null && due <= now) {
          this.deps.log?.(
            { agent: agent.name, missedSince: state?.next_run_at },
            'daemon missed its schedule; running one catch-up tick',
          );
          await this.schedule(agent, now);
        } else {
          await this.schedule(agent, due ?? nextRunAfter(agent, now));
        }
      }
      this.started = true;
    });
  }

  /**
   * Brings the schedule in line with the agents loaded now (after a reload):
   * a new daemon is scheduled one interval (or its first cron time) from now,
   * a daemon whose `every` or `cron` changed is rescheduled the same way, and
   * one that was removed, lost its `daemon` section or its valid schedule is
   * unscheduled; a tick of it that is running finishes, and nothing follows.
   * Does nothing before `start` (and so with daemons turned off). Never rejects.
   */
  sync(): Promise<void> {
    return this.serially(async () => {
      if (!this.started || this.stopped) return;
      const now = this.clock();
      const daemons = new Map(this.daemonAgents().map((agent) => [agent.name, agent]));
      for (const [name, schedule] of [...this.armed]) {
        if (daemons.has(name)) continue;
        this.armed.delete(name);
        this.spent.delete(name);
        clearTimeout(this.timers.get(name));
        this.timers.delete(name);
        this.deps.info?.({ agent: name, schedule }, 'daemon unscheduled');
      }
      for (const agent of daemons.values()) {
        const schedule = scheduleOf(agent)!;
        const previous = this.armed.get(agent.name);
        if (previous === schedule) continue;
        this.armed.set(agent.name, schedule);
        const next = nextRunAfter(agent, now);
        this.deps.info?.(
          {
            agent: agent.name,
            schedule,
            ...(previous === undefined ? {} : { previous }),
            nextRunAt: next?.toISOString() ?? null,
          },
          previous === undefined ? 'daemon scheduled' : 'daemon rescheduled',
        );
        await this.schedule(agent, next);
      }
    });
  }

  /**
   * Whether `agent`'s schedule is still the armed one: false once stopped, and
   * for a slot that ran while a reload unscheduled or rescheduled its daemon
   * (the reload armed what follows).
   */
  private isArmedWith(agent: AgentConfig): boolean {
    return !this.stopped && this.armed.get(agent.name) === scheduleOf(agent);
  }

  private serially(work: () => Promise<void>): Promise<void> {
    const run = this.applying.then(work, work);
    this.applying = run.catch(() => undefined);
    return run;
  }

  /** Stops scheduling and waits for running ticks. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    await Promise.all(this.ticking.values());
  }

  /**
   * One daemon tick: the agent's prompt as a task in a fresh `daemon` session,
   * which is closed afterwards. Returns undefined when a tick of this agent is
   * already running here or elsewhere (it is skipped). A scheduled tick names
   * its slot (`slot`, the stored next run it was armed for).
   */
  async runDaemonTick(
    { agentName }: { agentName: string },
    options: { scheduled?: boolean; slot?: Date } = {},
  ): Promise<TaskRow | undefined> {
    const running = this.ticking.get(agentName);
    if (running) return undefined;
    const tick = this.tick(agentName, options.scheduled === true, options.slot).finally(() =>
      this.ticking.delete(agentName),
    );
    this.ticking.set(agentName, tick);
    return tick;
  }

  private async tick(
    agentName: string,
    scheduled: boolean,
    slot?: Date,
  ): Promise<TaskRow | undefined> {
    const { sessions, store, events, tasks } = this.deps;
    const agent = this.deps.agents.get(agentName);
    if (!agent.daemon)
      throw new CairnError('VALIDATION_ERROR', `Agent "${agentName}" has no daemon schedule.`);
    if (this.overBudget(agent)) return undefined;
    // A timer may fire a millisecond or two before the time it was armed for
    // (its clock is not the wall clock): the tick still belongs to that slot,
    // so it claims as of the slot, or it would find its own slot not yet due.
    const now = this.clock();
    const startedAt = slot !== undefined && slot > now ? slot : now;
    // The schedule is timed from the slot, not from when its tick got going
    // or ended; a tick run by hand starts its own.
    const base = slot ?? startedAt;
    // A scheduled tick claims its slot too: instances sharing a database all
    // schedule it, and the first to claim it runs it, so a slot runs once.
    if (
      !(await store.claimDaemonLease(agent.name, this.owner, startedAt, DAEMON_LEASE_MS, scheduled))
    ) {
      // Routine with several instances: the slot ran (or runs) elsewhere. A
      // slot no instance runs, because a tick overran it, is reported by the
      // instance whose tick overran, when it ends.
      this.deps.debug?.(
        { agent: agent.name, ...(slot ? { slot: slot.toISOString() } : {}) },
        'daemon tick skipped: another tick holds the lease or ran this slot',
      );
      return undefined;
    }
    let task: TaskRow | undefined;
    try {
      // Consume this slot before running: if the process dies mid-tick, the
      // restart sees the next slot, not this one, so the tick never runs twice.
      await store.setDaemonNextRun(agent.name, nextSlot(agent, base, startedAt).next);
      task = await tasks.runTask({
        agentName: agent.name,
        input: agent.daemon.prompt,
        mode: 'daemon',
      });
      task = await tasks.wait(task.id);
      if (task.status === 'failed' && task.error?.startsWith('BUDGET_EXCEEDED'))
        this.spent.set(agent.name, { limits: agent.limits, told: false });
      // Nobody is there to answer a daemon's question: a tick never leaves a
      // task waiting on a session it is about to close.
      if (task.status === 'waiting') task = await tasks.cancelTask(task.id);
      await sessions.close(task.session_id);
      return task;
    } finally {
      let next: Date | null = null;
      try {
        const after = nextSlot(agent, base, this.clock());
        next = after.next;
        if (after.skipped > 0)
          this.deps.log?.(
            {
              agent: agent.name,
              slot: base.toISOString(),
              skippedSlots: after.skipped,
              nextRunAt: next?.toISOString() ?? null,
            },
            'daemon slots lost: no tick ran them (this one started late or ran past them, and ticks never overlap)',
          );
      } catch {
        // An invalid schedule still releases the lease; it is never rescheduled.
      }
      await store.finishDaemonRun(agent.name, this.owner, startedAt, next);
      await events.emit('daemon.tick', task?.session_id ?? null, {
        agentName: agent.name,
        taskId: task?.id ?? null,
        status: task?.status ?? 'failed',
        nextRunAt: next?.toISOString() ?? null,
      });
    }
  }

  /**
   * A daemon whose tick stopped on its budget runs no more ticks until its
   * limits change (agent.json edited and reloaded) or the server restarts:
   * a loop that burns its budget every tick would burn it every interval.
   * Said once, at the first skipped tick.
   */
  private overBudget(agent: AgentConfig): boolean {
    const spent = this.spent.get(agent.name);
    if (!spent) return false;
    if (spent.limits !== agent.limits) {
      this.spent.delete(agent.name);
      return false;
    }
    if (!spent.told) {
      spent.told = true;
      this.deps.log?.(
        { agent: agent.name },
        "daemon ticks skipped: the last tick reached the agent's limits (BUDGET_EXCEEDED); they resume when limits in agent.json change or the server restarts",
      );
    }
    return true;
  }

  /**
   * After a slot, ticked here or by a peer: the next run the database records
   * (the tick that ran wrote it), so every instance aims at the same slot.
   * Never rejects: a failed read falls back to the agent's own schedule, in
   * phase with `slot`.
   */
  private async scheduleStoredNext(agent: AgentConfig, slot: Date): Promise<void> {
    const now = this.clock();
    let stored: Date | null = null;
    try {
      const state = await this.deps.store.findDaemonState(agent.name);
      stored = state?.next_run_at ? new Date(state.next_run_at) : null;
    } catch {
      // Scheduled from the agent's own schedule below.
    }
    if (stored !== null && stored > now) await this.schedule(agent, stored, { record: false });
    else await this.schedule(agent, nextSlot(agent, slot, now).next);
  }

  /**
   * Records `at` as the agent's next run (unless it is already the stored
   * one), then arms the timer. The write is awaited before the timer exists,
   * so a tick never races it; a failed write is logged and the timer still
   * armed, because the schedule in memory is what fires ticks. Never rejects.
   */
  private async schedule(
    agent: AgentConfig,
    at: Date | null,
    options = { record: true },
  ): Promise<void> {
    if (!this.isArmedWith(agent) || at === null) return;
    if (options.record) {
      try {
        await this.deps.store.setDaemonNextRun(agent.name, at);
      } catch (err) {
        this.deps.log?.(
          { agent: agent.name, error: (err as Error).message },
          'could not store next daemon run',
        );
      }
      if (!this.isArmedWith(agent)) return;
    }
    const delay = Math.max(0, at.getTime() - this.clock().getTime());
    const timer = setTimeout(
      () => {
        // A wait beyond setTimeout's limit is re-armed; the stored run is unchanged.
        if (delay > MAX_TIMER_MS) return void this.schedule(agent, at, { record: false });
        void this.runDaemonTick({ agentName: agent.name }, { scheduled: true, slot: at })
          .catch((err: unknown) =>
            this.deps.log?.(
              { agent: agent.name, error: (err as Error).message },
              'daemon tick failed',
            ),
          )
          .finally(() => this.scheduleStoredNext(agent, at));
      },
      Math.min(delay, MAX_TIMER_MS),
    );
    timer.unref();
    clearTimeout(this.timers.get(agent.name));
    this.timers.set(agent.name, timer);
  }
}
