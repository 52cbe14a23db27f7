/**
 * Approval timeouts: a call to a tool with an `approvalTimeout` that nobody
 * approves or denies in time is denied, with a result the model sees. The
 * deadline is on the task row (`approval_expires_at`), so it survives a
 * restart: at start-up every waiting task's deadline is armed again, and one
 * that passed while the server was down is applied at once. The denial is the
 * task's ordinary compare-and-set transition out of `waiting`, so with several
 * instances arming the same deadline exactly one denial lands.
 */
import { CairnError } from '../errors.js';
import type { TaskStore } from '../store/store.js';
import { parseDuration } from './duration.js';

/** setTimeout's longest delay; a later deadline is re-armed when it is reached. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** What a timed-out call's result says to the model. */
export const APPROVAL_TIMED_OUT_RESULT =
  'Nobody approved or denied this tool call within its approval timeout, so it was denied and not run. Continue without it, or ask the user whether to try again.';

/** The deadline of a wait that starts at `from`. */
export function approvalDeadline(timeout: string, from: Date): Date {
  return new Date(from.getTime() + parseDuration(timeout, 'approvalTimeout'));
}

export interface ApprovalTimer {
  /** Denies the task's pending call at `at` unless it was decided before. */
  arm(taskId: string, at: Date): void;
}

export interface ApprovalTimeoutsDeps {
  store: Pick<TaskStore, 'listTasks'>;
  /** Denies the pending call of a task because its wait ran out. */
  deny: (taskId: string) => Promise<unknown>;
  log?: (details: Record<string, unknown>, message: string) => void;
  now?: () => number;
}

export class ApprovalTimeouts implements ApprovalTimer {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly deps: ApprovalTimeoutsDeps) {}

  arm(taskId: string, at: Date): void {
    if (this.closed) return;
    clearTimeout(this.timers.get(taskId));
    const delay = Math.max(0, at.getTime() - (this.deps.now?.() ?? Date.now()));
    const timer = setTimeout(
      () => {
        this.timers.delete(taskId);
        if (delay > MAX_TIMER_MS) return this.arm(taskId, at);
        void this.expire(taskId);
      },
      Math.min(delay, MAX_TIMER_MS),
    );
    timer.unref();
    this.timers.set(taskId, timer);
  }

  /** Arms every waiting task's deadline (start-up); past ones are applied at once. */
  async recover(): Promise<number> {
    let armed = 0;
    let cursor: string | undefined;
    do {
      const page = await this.deps.store.listTasks({
        status: 'waiting',
        limit: 500,
        ...(cursor ? { cursor } : {}),
      });
      for (const task of page.items) {
        if (task.approval_expires_at === null || task.pending_tool === null) continue;
        this.arm(task.id, new Date(task.approval_expires_at));
        armed += 1;
      }
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    return armed;
  }

  close(): void {
    this.closed = true;
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  private async expire(taskId: string): Promise<void> {
    try {
      await this.deps.deny(taskId);
    } catch (err) {
      // Decided in time (here or by a peer instance): nothing to deny.
      if (
        err instanceof CairnError &&
        (err.code === 'TASK_NOT_WAITING' || err.code === 'TASK_NOT_FOUND')
      )
        return;
      this.deps.log?.(
        { taskId, error: err instanceof Error ? err.message : String(err) },
        'could not apply an approval timeout',
      );
    }
  }
}
