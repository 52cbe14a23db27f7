/**
 * What a new server process does about the work a dead one left behind (a crash
 * or `kill -9` mid-turn, or mid daemon tick). On SQLite `cairn serve` holds the
 * database's process lock (store/sqlite/process-lock.ts), so at start nothing
 * else runs on this database: every `running` task, every open daemon session
 * and every daemon lease belongs to a process that is gone. On a database
 * shared by instances peers are running: only tasks whose owner stopped
 * heartbeating are interrupted, and only such an instance's daemon leases are
 * freed.
 */
import type {
  DaemonLeaseStore,
  InstanceStore,
  OrphanScope,
  SessionRow,
  SessionStore,
  TaskStore,
} from '../store/store.js';

/** The parts of the store that recovery touches. */
type RecoveryStore = Pick<SessionStore, 'listSessions' | 'closeSession'> &
  Pick<TaskStore, 'interruptRunningTasks'> &
  Pick<DaemonLeaseStore, 'releaseDaemonLeases'>;

const PAGE_SIZE = 200;

export interface RecoveryReport {
  /** Tasks that were running, now `interrupted` (resumable). */
  interruptedTasks: number;
  /** Daemon tick sessions a dead tick left open, now closed. */
  closedDaemonSessions: number;
  /** Daemon leases a dead tick held, now free: the daemon ticks on schedule. */
  releasedDaemonLeases: number;
}

async function openDaemonSessions(store: RecoveryStore): Promise<SessionRow[]> {
  const sessions: SessionRow[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.listSessions({
      mode: 'daemon',
      status: 'active',
      limit: PAGE_SIZE,
      ...(cursor ? { cursor } : {}),
    });
    sessions.push(...page.items);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return sessions;
}

/** Closes out what the previous process left running. Call once, before serving. */
export async function recoverAfterRestart(store: RecoveryStore): Promise<RecoveryReport> {
  const deadTicks = await openDaemonSessions(store);
  const interruptedTasks = await store.interruptRunningTasks();
  // A daemon session lives for one tick and is closed by it; nobody resumes
  // a dead tick (the next slot runs the prompt again).
  for (const session of deadTicks) await store.closeSession(session.id);
  const releasedDaemonLeases = await store.releaseDaemonLeases();
  return { interruptedTasks, closedDaemonSessions: deadTicks.length, releasedDaemonLeases };
}

/**
 * Start-up on a database shared by live peers (and each heartbeat's sweep):
 * closes only the daemon sessions, interrupts only the running tasks, and
 * frees only the daemon leases, whose owner is gone (no heartbeat within
 * `staleAfterMs`). A live peer's tick keeps its session open. Sessions go
 * first: a dead tick is recognised by its running task and its lease.
 */
export async function recoverOrphanedWork(
  store: Pick<
    InstanceStore,
    'closeOrphanedDaemonSessions' | 'interruptOrphanedTasks' | 'releaseOrphanedDaemonLeases'
  >,
  scope: OrphanScope,
): Promise<RecoveryReport> {
  const closedDaemonSessions = await store.closeOrphanedDaemonSessions(scope);
  const interruptedTasks = await store.interruptOrphanedTasks(scope);
  const releasedDaemonLeases = await store.releaseOrphanedDaemonLeases(scope);
  return { interruptedTasks, closedDaemonSessions, releasedDaemonLeases };
}
