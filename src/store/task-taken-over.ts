/**
 * The error of a write by a task run that no longer owns its task: a peer
 * declared this instance dead (it stopped heartbeating, paused or frozen)
 * and marked the task `interrupted`, or resumed it and runs it now. The run
 * must stop and store nothing more, exactly as when its session lock is lost.
 */
import { CairnError } from '../errors.js';
import type { TaskRow } from './store.js';

export function taskTakenOver(taskId: string, task: TaskRow | undefined): CairnError {
  const now = task ? `is ${task.status}` : 'no longer exists';
  return new CairnError(
    'SESSION_LOCK_LOST',
    `Task "${taskId}" ${now}: another instance took it over while this one was not heartbeating (paused or cut off), so this run stopped and stored nothing more. Resume the task with POST /tasks/${taskId}/resume.`,
  );
}

/**
 * Inside an append's transaction: the task is still the running task of
 * `instanceId` (or of no recorded owner); else the run was taken over.
 */
export function requireRunningTask(
  taskId: string,
  task: TaskRow | undefined,
  instanceId: string | null,
): void {
  const mine = task?.owner_instance == null || task.owner_instance === instanceId;
  if (task?.status !== 'running' || !mine) throw taskTakenOver(taskId, task);
}
