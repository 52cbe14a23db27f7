/**
 * When a session may take a turn: it exists, it belongs to the agent asked,
 * it is open, and (for new input) no task on it waits for a person. Pure checks, shared by the session service (which answers a
 * request early) and the turn engine (which checks again under the slot, as
 * the session may have been closed while the request waited).
 */
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import type { SessionRow, TaskRow } from '../store/store.js';
import { pendingApprovalCall } from './approvals.js';
import { requireSession } from '../store/session-not-found.js';

/** `session` when `agent` may run a turn on it; else 404, 409 `SESSION_AGENT_MISMATCH` or `SESSION_CLOSED`. */
export function requireUsable(
  session: SessionRow | undefined,
  id: string,
  agent: Pick<AgentConfig, 'name'>,
): SessionRow {
  const found = requireSession(session, id);
  if (found.agent_name !== agent.name) {
    throw new CairnError(
      'SESSION_AGENT_MISMATCH',
      `Session "${id}" belongs to agent "${found.agent_name}", not "${agent.name}". Use POST /agents/${found.agent_name}/chat.`,
    );
  }
  if (found.status === 'closed') {
    throw new CairnError('SESSION_CLOSED', `Session "${id}" is closed. Start a new session.`);
  }
  return found;
}

/** 409 `TASK_WAITING` when `waiting` (the session's waiting task, if any) waits for an answer or an approval. */
export function refuseIfTaskWaiting(waiting: TaskRow | undefined): void {
  if (waiting && pendingApprovalCall(waiting)) {
    throw new CairnError(
      'TASK_WAITING',
      `Task "${waiting.id}" on this session is waiting for a person to approve the tool call "${waiting.pending_tool ?? ''}". Approve it with POST /tasks/${waiting.id}/approve, or deny it with POST /tasks/${waiting.id}/deny.`,
    );
  }
  if (waiting) {
    throw new CairnError(
      'TASK_WAITING',
      `Task "${waiting.id}" on this session is waiting for an answer: ${waiting.question ?? ''} Answer it with POST /tasks/${waiting.id}/resume.`,
    );
  }
}
