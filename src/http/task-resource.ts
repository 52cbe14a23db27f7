/**
 * A task as the API returns it: the stored row, whose `pending_arguments` and
 * `decided_by` keep their documented form (JSON text), with each one's parsed
 * value beside it, so a client need not parse JSON inside JSON.
 */
import type { TaskRow } from '../store/store.js';

export interface TaskResource extends TaskRow {
  /** `pending_arguments` parsed; null when there is no pending call or its text is not JSON (a model may send that). */
  pending_arguments_parsed: unknown;
  /** `decided_by` parsed: who approved or denied the last held call (`key` null for the admin); null until decided. */
  decided_by_parsed: { key: string | null; user: string | null } | null;
}

export function taskResource(task: TaskRow): TaskResource {
  return {
    ...task,
    pending_arguments_parsed: parseOrNull(task.pending_arguments),
    decided_by_parsed: parseOrNull(task.decided_by) as TaskResource['decided_by_parsed'],
  };
}

function parseOrNull(text: string | null): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}
