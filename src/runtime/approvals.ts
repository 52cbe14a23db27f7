/**
 * Tool approval, so a tool output that says "call delete_x" cannot make a
 * side-effecting tool run on its own: a call to a tool marked
 * `approval: "required"` stops the loop, and the task waits in `waiting` with
 * the call on its row (`pending_call_id`, `pending_tool`,
 * `pending_arguments`) until a person approves or denies it. The row is the
 * source of truth, so the wait survives a restart. This module owns the texts
 * and the one transition into that wait; TaskRunner continues the task.
 */
import type { ToolCall } from '../llm/messages.js';
import type { TaskRow, TaskStore } from '../store/store.js';
import type { EventBus } from './event-bus.js';
import { approvalDeadline, type ApprovalTimer } from './approval-timeouts.js';

/** The question a task waiting for approval shows (task row, events, chat reply). */
export function approvalQuestion(taskId: string, call: ToolCall): string {
  return `Approval needed: the agent wants to call the tool "${call.function.name}" with arguments ${call.function.arguments || '{}'}. Approve it with POST /tasks/${taskId}/approve, or deny it with POST /tasks/${taskId}/deny (optional {"reason": "…"}, which the agent sees).`;
}

/** The tool result the model sees when a person denies its call. */
export function deniedResult(reason: string | undefined): string {
  const said = reason?.trim() ?? '';
  // "Their reason: not this month Do not call it…" would run into the next sentence.
  const why = said ? ` Their reason: ${said}${/[.!?]$/.test(said) ? '' : '.'}` : '';
  return `A person denied this tool call; it was not run.${why} Do not call it again unless asked to; continue without it.`;
}

/** What a subagent answers when one of its calls needs approval (nobody can give it there). */
export function approvalInSubagentResult(agentName: string, call: ToolCall): string {
  return `The subagent "${agentName}" stopped: its call to the tool "${call.function.name}" needs a person's approval, which is not available inside a subagent. Nothing was run.`;
}

/** Moves a running task to `waiting` on `call` and announces it; returns the row, or undefined if it was no longer running. */
export async function waitForApproval(
  deps: {
    store: Pick<TaskStore, 'transitionTask'>;
    events: Pick<EventBus, 'emit'>;
    approvalTimer?: ApprovalTimer | undefined;
  },
  task: TaskRow,
  call: ToolCall,
  /** The tool's approvalTimeout ("30m"): the wait ends in a denial then. */
  approvalTimeout?: string,
): Promise<TaskRow | undefined> {
  const row = await recordApprovalWait(deps, task, call, approvalTimeout);
  if (row) await announceApprovalWait(deps, row, call);
  return row;
}

/**
 * The one transition into a wait for approval: moves a running task to
 * `waiting` on `call` (and arms its deadline); returns the row, or undefined
 * if it was no longer running. A task's own run records it in its session's
 * slot and announces it once the slot is released (`announceApprovalWait`).
 */
export async function recordApprovalWait(
  deps: {
    store: Pick<TaskStore, 'transitionTask'>;
    approvalTimer?: ApprovalTimer | undefined;
  },
  task: TaskRow,
  call: ToolCall,
  approvalTimeout?: string,
): Promise<TaskRow | undefined> {
  const question = approvalQuestion(task.id, call);
  const expiresAt =
    approvalTimeout === undefined ? null : approvalDeadline(approvalTimeout, new Date());
  const row = await deps.store.transitionTask(task.id, ['running'], {
    status: 'waiting',
    question,
    pending_call_id: call.id,
    pending_tool: call.function.name,
    pending_arguments: call.function.arguments,
    approval_expires_at: expiresAt?.toISOString() ?? null,
  });
  if (row && expiresAt) deps.approvalTimer?.arm(row.id, expiresAt);
  return row;
}

/** The `task.waiting` event of a task `recordApprovalWait` moved to waiting on `call`. */
export async function announceApprovalWait(
  deps: { events: Pick<EventBus, 'emit'> },
  waiting: TaskRow,
  call: ToolCall,
): Promise<void> {
  await deps.events.emit('task.waiting', waiting.session_id, {
    taskId: waiting.id,
    question: waiting.question ?? approvalQuestion(waiting.id, call),
    approval: { tool: call.function.name, arguments: call.function.arguments },
  });
}

/** The call a task waits on for approval, rebuilt from its row; undefined if it does not. */
export function pendingApprovalCall(task: TaskRow): ToolCall | undefined {
  if (task.status !== 'waiting' || task.pending_tool === null || task.pending_call_id === null)
    return undefined;
  return {
    id: task.pending_call_id,
    type: 'function',
    function: { name: task.pending_tool, arguments: task.pending_arguments ?? '' },
  };
}
