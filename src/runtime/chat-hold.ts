/**
 * The holds of a turn run for a person waiting on the request (a chat, a
 * `/v1` call), in one place: an `ask_user` question becomes the reply, its
 * call answered so the history stays valid; a call awaiting approval becomes
 * a waiting task, whose question is the reply. Both are written through the
 * turn's write port, inside the session's slot, before the slot is released — so a
 * chat that queued behind this turn finds the task waiting (`TASK_WAITING`).
 */
import type { ApprovalTimer } from './approval-timeouts.js';
import { waitForApproval } from './approvals.js';
import type { Turn } from './turn.js';
import type { TurnOutcome } from './turn-outcome.js';

/** The result an `ask_user` call gets when a chat holds it: the question went out as the reply. */
export const ASK_USER_IN_CHAT_RESULT =
  'The question was shown to the user as your reply; their answer will arrive as the next user message.';

/** How a turn a person waits on holds its question or approval. */
export interface ChatHold {
  /** The input a held approval's task records (the user's message). */
  taskInput: string;
  /**
   * Also store the question as the assistant's text: a `/v1` client shows it
   * as the reply and resends it, and the transcript hash must match that.
   */
  storeQuestion?: boolean;
}

/** No store: a hold writes through the turn's port alone. */
export interface ChatHoldDeps {
  approvalTimer?: ApprovalTimer;
}

/** A question or an approval held for the person waiting on the request; other outcomes pass. */
export async function holdInChat(
  deps: ChatHoldDeps,
  turn: Turn,
  outcome: TurnOutcome,
  hold: ChatHold,
): Promise<TurnOutcome> {
  if (outcome.kind === 'question') {
    await turn.persist([
      {
        role: 'tool',
        tool_call_id: outcome.callId,
        name: 'ask_user',
        content: ASK_USER_IN_CHAT_RESULT,
      },
      ...(hold.storeQuestion === true
        ? [{ role: 'assistant' as const, content: outcome.question }]
        : []),
    ]);
    return { kind: 'held-question', question: outcome.question, callId: outcome.callId };
  }
  if (outcome.kind !== 'approval') return outcome;
  const { writes } = turn;
  const task = await writes.createTask({ agentName: turn.agent.name, input: hold.taskInput });
  const waiting = await waitForApproval(
    {
      store: writes,
      events: writes,
      ...(deps.approvalTimer ? { approvalTimer: deps.approvalTimer } : {}),
    },
    task,
    outcome.call,
    outcome.approvalTimeout,
  );
  return {
    kind: 'held-approval',
    call: outcome.call,
    task: { id: task.id, question: waiting?.question ?? '' },
  };
}
