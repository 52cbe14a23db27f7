/**
 * How a Cairn task looks to an A2A peer, and how a peer's message reads to
 * Cairn: pure functions over task rows and A2A messages, no I/O.
 *
 * A Cairn task is the A2A task (same id); its session is the A2A context.
 * A task waiting for an `ask_user` answer or for a person's approval is
 * `input-required`, and so is an interrupted task: in each case the
 * next message on the task continues it.
 */
import { Role, TaskState } from '@a2a-js/sdk';
import type { Artifact, Message, Part, Task, TaskStatus as A2ATaskStatus } from '@a2a-js/sdk';
import type { TaskRow, TaskStatus } from '../store/store.js';
import { interruptionCause } from '../runtime/interruption.js';

/** The artifact a completed task's reply is published as. */
export const REPLY_ARTIFACT_ID = 'reply';

const STATE_OF: Record<TaskStatus, TaskState> = {
  running: TaskState.TASK_STATE_WORKING,
  waiting: TaskState.TASK_STATE_INPUT_REQUIRED,
  interrupted: TaskState.TASK_STATE_INPUT_REQUIRED,
  completed: TaskState.TASK_STATE_COMPLETED,
  failed: TaskState.TASK_STATE_FAILED,
  cancelled: TaskState.TASK_STATE_CANCELED,
};

export function a2aState(status: TaskStatus): TaskState {
  return STATE_OF[status];
}

/** A state after which the task never changes again. */
export function isTerminal(status: TaskStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled';
}

/** A state a stream stops at: terminal, or waiting for the peer's next message. */
export function isSettled(status: TaskStatus): boolean {
  return status !== 'running';
}

/**
 * The Cairn status an A2A `ListTasks` state filter selects, or `null` for a
 * state no Cairn task is ever in (submitted, rejected, auth-required).
 * `input-required` selects the tasks waiting for an answer or an approval.
 */
export function statusForState(state: TaskState): TaskStatus | null {
  switch (state) {
    case TaskState.TASK_STATE_WORKING:
      return 'running';
    case TaskState.TASK_STATE_INPUT_REQUIRED:
      return 'waiting';
    case TaskState.TASK_STATE_COMPLETED:
      return 'completed';
    case TaskState.TASK_STATE_FAILED:
      return 'failed';
    case TaskState.TASK_STATE_CANCELED:
      return 'cancelled';
    default:
      return null;
  }
}

export function textPart(text: string): Part {
  return {
    content: { $case: 'text', value: text },
    metadata: undefined,
    filename: '',
    mediaType: '',
  };
}

function dataPart(value: Record<string, unknown>): Part {
  return {
    content: { $case: 'data', value },
    metadata: undefined,
    filename: '',
    mediaType: 'application/json',
  };
}

function agentMessage(task: TaskRow, messageId: string, parts: Part[]): Message {
  return {
    messageId,
    contextId: task.session_id,
    taskId: task.id,
    role: Role.ROLE_AGENT,
    parts,
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

/** What a task waiting for approval asks the peer, in words a person or a model can follow. */
export function approvalPrompt(tool: string, args: string): string {
  return `Approval needed: the agent wants to call the tool "${tool}" with arguments ${args || '{}'}. Reply "approve" to run it, or "deny" followed by a reason to refuse it (the agent sees the reason).`;
}

/** The agent's word on the task's current state: its question, reply, error or why it stopped. */
function statusMessage(task: TaskRow): Message | undefined {
  switch (task.status) {
    case 'waiting':
      if (task.pending_tool !== null) {
        return agentMessage(task, `${task.id}-approval-${task.pending_call_id ?? ''}`, [
          textPart(approvalPrompt(task.pending_tool, task.pending_arguments ?? '')),
          dataPart({
            approval: { tool: task.pending_tool, arguments: task.pending_arguments ?? '' },
          }),
        ]);
      }
      return agentMessage(task, `${task.id}-question-${task.pending_call_id ?? ''}`, [
        textPart(task.question ?? 'The agent is waiting for your answer.'),
      ]);
    case 'interrupted':
      return agentMessage(task, `${task.id}-interrupted`, [
        textPart(
          `The task was interrupted: ${interruptionCause(task.error)}. Send a message on this task to continue it (your text, if any, is passed on to the agent).`,
        ),
      ]);
    case 'completed':
      return agentMessage(task, `${task.id}-reply`, [textPart(task.result ?? '')]);
    case 'failed':
    case 'cancelled':
      return agentMessage(task, `${task.id}-${task.status}`, [textPart(task.error ?? '')]);
    default:
      return undefined;
  }
}

export function taskStatus(task: TaskRow): A2ATaskStatus {
  return { state: a2aState(task.status), message: statusMessage(task), timestamp: task.updated_at };
}

/** The reply of a completed task, as the one artifact it produces. */
export function replyArtifact(task: TaskRow): Artifact | undefined {
  if (task.status !== 'completed') return undefined;
  return {
    artifactId: REPLY_ARTIFACT_ID,
    name: 'reply',
    description: "The agent's reply",
    parts: [textPart(task.result ?? '')],
    metadata: undefined,
    extensions: [],
  };
}

/**
 * The task as A2A shows it. The history is what the row records: the input
 * that started the task and the agent's latest word; the whole conversation
 * is the session's (`GET /sessions/:id/messages`). `historyLength`: absent
 * for all of it, 0 for none, N for the newest N.
 */
export function toA2ATask(task: TaskRow, historyLength?: number): Task {
  const input: Message = {
    messageId: `${task.id}-input`,
    contextId: task.session_id,
    taskId: task.id,
    role: Role.ROLE_USER,
    parts: [textPart(task.input)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
  const status = taskStatus(task);
  const history = status.message ? [input, status.message] : [input];
  const artifact = replyArtifact(task);
  return {
    id: task.id,
    contextId: task.session_id,
    status,
    artifacts: artifact ? [artifact] : [],
    history:
      historyLength === undefined
        ? history
        : history.slice(Math.max(0, history.length - historyLength)),
    metadata: { cairn: { status: task.status, agentName: task.agent_name } },
  };
}

/**
 * The text a peer's message gives the agent: its text parts, and its data
 * parts as JSON, in order. Undefined when it has neither (only files, or
 * nothing).
 */
export function messageText(message: Message): string | undefined {
  const pieces: string[] = [];
  for (const part of message.parts) {
    const content = part.content;
    if (content?.$case === 'text') pieces.push(content.value);
    else if (content?.$case === 'data') pieces.push(JSON.stringify(content.value));
  }
  const text = pieces.join('\n');
  return text.trim() === '' ? undefined : text;
}

/** True when the message carries a file (raw bytes or a URL), which Cairn does not take. */
export function hasFileParts(message: Message): boolean {
  return message.parts.some((p) => p.content?.$case === 'raw' || p.content?.$case === 'url');
}

export type ApprovalDecision = { decision: 'approve' } | { decision: 'deny'; reason?: string };

const APPROVE = /^\s*(approve|approved|yes|y|ok)\b/i;
/**
 * Anything that takes an approval back or makes it a question: "approved? no!"
 * is not an approval, whatever word it starts with.
 */
const HEDGED =
  /\?|\b(no|not|nope|never|deny|denied|reject|rejected|don'?t|cancel|stop|wait|but)\b/i;
const DENY = /^\s*(deny|denied|no|n|reject)\b[\s.,:;!-]*([\s\S]*)$/i;

/**
 * A peer's answer to an approval request: a data part
 * `{"decision": "approve" | "deny", "reason"?: "…"}`, or text that starts
 * with "approve" / "yes" and takes nothing back ("approved? no!" is no
 * approval), or with "deny" / "no" (the rest is the reason). Undefined when
 * it is neither, so nothing is run on a guess: the peer is asked again.
 */
export function approvalDecision(message: Message): ApprovalDecision | undefined {
  for (const part of message.parts) {
    const content = part.content;
    if (content?.$case !== 'data' || typeof content.value !== 'object' || content.value === null)
      continue;
    const { decision, reason } = content.value as { decision?: unknown; reason?: unknown };
    if (decision === 'approve') return { decision: 'approve' };
    if (decision === 'deny')
      return typeof reason === 'string' && reason.trim() !== ''
        ? { decision: 'deny', reason }
        : { decision: 'deny' };
  }
  const text = message.parts
    .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
    .join('\n');
  if (APPROVE.test(text)) return HEDGED.test(text) ? undefined : { decision: 'approve' };
  const deny = DENY.exec(text);
  if (deny) {
    const reason = (deny[2] ?? '').trim();
    return reason === '' ? { decision: 'deny' } : { decision: 'deny', reason };
  }
  return undefined;
}
