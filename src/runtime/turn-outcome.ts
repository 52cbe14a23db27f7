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
  /** The model asked the user (`ask_user`); the call waits for the answer (a task's wait). */
  | { kind: 'question'; question: string; callId: string }
  /**
   * The model asked the user in a turn a person waits on (a chat): the call
   * got its result and the question is the reply; the answer comes as the
   * next message.
   */
  | { kind: 'held-question'; question: string; callId: string }
  /** A call to a tool marked `approval: "required"` waits for a person. */
  | { kind: 'approval'; call: ToolCall; approvalTimeout?: string }
  /**
   * Such a call in a turn a person waits on (a chat): it became the waiting
   * `task`, whose question is the reply.
   */
  | { kind: 'held-approval'; call: ToolCall; task: { id: string; question: string } }
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

/**
 * The outcome as the span attribute `cairn.turn.outcome` spells it: a held
 * question or approval is still a question or an approval there.
 */
export function publicOutcome(outcome: TurnOutcome): string {
  switch (outcome.kind) {
    case 'held-question':
      return 'question';
    case 'held-approval':
      return 'approval';
    default:
      return outcome.kind;
  }
}

/**
 * For an outcome its caller's request rules out (a held question in a turn
 * run without `holdInChat`, or an unheld one in a turn run with it): an
 * internal error naming it.
 */
export function impossibleOutcome(outcome: TurnOutcome): never {
  throw new Error(`turn outcome "${outcome.kind}" cannot end a turn run this way`);
}

/** For an exhaustive `switch` over outcomes: the compiler proves this is never reached. */
export function unreachableOutcome(outcome: never): never {
  throw new Error(`unknown turn outcome ${JSON.stringify(outcome)}`);
}
