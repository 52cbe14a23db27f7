/**
 * How a turn ended, decided once. The loop stops for one of a closed set of
 * reasons; every way in (chat, tasks, subagents, `/v1`, MCP, A2A) maps this
 * set onto its own wire with one exhaustive `switch`, instead of each reading
 * the loop's result (or its exceptions) in its own way.
 */
import { CairnError } from '../errors.js';
import type { ToolCall } from '../llm/messages.js';
import type { LoopResult } from './loop.js';

/** Stops that are limits of the agent, not failures: the turn did work before it stopped. */
const LIMIT_CODES: ReadonlySet<string> = new Set(['BUDGET_EXCEEDED', 'MAX_ITERATIONS']);

export type TurnOutcome =
  /** The model answered in text. */
  | { kind: 'reply'; reply: string }
  /**
   * The model asked the user (`ask_user`). `answered` is true when the turn
   * held it chat-style: the call got its result and the question is the reply.
   */
  | { kind: 'question'; question: string; callId: string; answered: boolean }
  /**
   * A call to a tool marked `approval: "required"` waits for a person. `task`
   * is the waiting task a chat-style hold created for it.
   */
  | {
      kind: 'approval';
      call: ToolCall;
      approvalTimeout?: string;
      task?: { id: string; question: string };
    }
  /** Calls whose results come from the API client that offered the tools; the turn's other calls ran. */
  | { kind: 'client-tools'; reply: string; calls: ToolCall[] }
  /** An agent limit stopped the turn (`BUDGET_EXCEEDED`, `MAX_ITERATIONS`). */
  | { kind: 'limit'; error: CairnError }
  /** The turn failed: the model, a store write, a lost session lock, a cancel. */
  | { kind: 'failed'; error: unknown };

export type TurnOutcomeKind = TurnOutcome['kind'];

/** The outcome of a loop that returned. */
export function outcomeOf(result: LoopResult): TurnOutcome {
  switch (result.kind) {
    case 'answer':
      return { kind: 'reply', reply: result.reply };
    case 'waiting':
      return {
        kind: 'question',
        question: result.question,
        callId: result.callId,
        answered: false,
      };
    case 'pending':
      return {
        kind: 'approval',
        call: result.call,
        ...(result.approvalTimeout !== undefined
          ? { approvalTimeout: result.approvalTimeout }
          : {}),
      };
    case 'outside':
      return { kind: 'client-tools', reply: result.reply, calls: result.calls };
  }
}

/** The outcome of a loop that threw. */
export function outcomeOfError(error: unknown): TurnOutcome {
  return error instanceof CairnError && LIMIT_CODES.has(error.code)
    ? { kind: 'limit', error }
    : { kind: 'failed', error };
}

/** The error of a turn that did not end in one of the ways a caller answers: a limit or a failure. */
export function stopError(outcome: TurnOutcome): unknown {
  return outcome.kind === 'limit' || outcome.kind === 'failed' ? outcome.error : undefined;
}

/** A turn that ended without an outcome its caller answers: rethrows its limit or failure. */
export function throwIfStopped(
  outcome: TurnOutcome,
): asserts outcome is Exclude<TurnOutcome, { kind: 'limit' } | { kind: 'failed' }> {
  if (outcome.kind === 'limit' || outcome.kind === 'failed') throw outcome.error;
}

/** The waiting task of an approval a chat held (`holdInChat` always creates one). */
export function heldTask(outcome: Extract<TurnOutcome, { kind: 'approval' }>): {
  id: string;
  question: string;
} {
  if (!outcome.task) throw new Error('an approval held in a chat has no waiting task');
  return outcome.task;
}

/** For an exhaustive `switch` over outcomes: the compiler proves this is never reached. */
export function unreachableOutcome(outcome: never): never {
  throw new Error(`unknown turn outcome ${JSON.stringify(outcome)}`);
}
