/**
 * Why an `interrupted` task stopped, said as it happened. A task is
 * interrupted when its server stops (a restart finds it running, or a
 * shutdown's grace period ends), when a peer finds the instance running it no
 * longer heartbeating (it crashed, or was paused: SIGSTOP, a long GC, a frozen
 * VM), or when a database outage cuts its run short. The row's `error` says
 * which; the prompt a resume sends and the A2A status read it from there, so
 * a paused instance's task is never said to have met a restart.
 */
import { INSTANCE_LOST_ERROR, INTERRUPTED_ERROR } from '../store/records.js';

/** What stopped the task, as a clause: "the server running it stopped". */
export function interruptionCause(error: string | null): string {
  if (error === INTERRUPTED_ERROR) return 'the server running it stopped';
  if (error === INSTANCE_LOST_ERROR)
    return 'the Cairn instance running it went away or stopped answering (shut down, crashed or paused), and another instance marked it interrupted';
  if (error !== null && error.trim() !== '') return `its run was cut short (${error})`;
  return 'its run was cut short';
}

/** The user message a resume without a message of its own continues the task with. */
export function resumeAfterInterruption(error: string | null): string {
  return `Continue the task where you left off. (It was interrupted: ${interruptionCause(error)}; tool calls that were running then have no known outcome.)`;
}
