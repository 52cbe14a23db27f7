/**
 * The tool seam: built-ins, subagents and agent-folder modules all implement
 * `Tool`. A tool returns text (or JSON-serialisable data); throwing is fine —
 * the loop turns errors into tool results the model can read.
 */
import type { MemoryStore, MessageLog } from '../store/store.js';

/** The one read of the message log a tool may make: `history_search`. */
export type HistorySearch = Pick<MessageLog, 'searchHistory'>;

/** Default per-call limit; a tool may set its own `timeoutMs`. */
export const TOOL_TIMEOUT_MS = 30_000;

export interface ToolContext {
  readonly sessionId: string;
  readonly agentName: string;
  /** The id of the tool call being answered. */
  readonly callId: string;
  /** Aborted when the call times out or the turn is cancelled. */
  readonly signal: AbortSignal;
  /** Tools see two narrow ports, never the whole store. */
  readonly history: HistorySearch;
  readonly memory: MemoryStore;
  /** How many subagent levels sit above this session (0 for a top-level session). */
  readonly depth: number;
  /** Agent names from the top-level session down to this one, for cycle checks. */
  readonly lineage: readonly string[];
  /** Shared by a top-level run and every subagent under it: nesting cannot multiply it. */
  readonly budget: RunBudget;
}

export interface Tool {
  readonly name: string;
  readonly description: string;
  /** JSON Schema of the arguments object; arguments are validated before `run`. */
  readonly parameters: Record<string, unknown>;
  readonly timeoutMs?: number;
  /**
   * `required`: the loop never runs a call to this tool on its own; it stops,
   * and a person approves or denies the call.
   */
  readonly approval?: 'required';
  /** With approval required: how long a call waits for a person before it is denied ("30m"). */
  readonly approvalTimeout?: string;
  /**
   * Who wrote `parameters`: the agent's side (built-ins, modules, MCP
   * servers), or a request's caller (an OpenAI client's own tools), whose
   * schema is checked by the rules for caller input.
   */
  readonly schemaFrom?: 'agent' | 'caller';
  run(args: Record<string, unknown>, ctx: ToolContext): Promise<unknown>;
}

/** What one top-level run may still spend; subagent runs draw from their caller's. */
export interface RunBudget {
  subagentsLeft: number;
}

const WAIT_FOR_USER = Symbol('cairn.waitForUser');

/** Returned by `ask_user`: the loop stops and the task waits for an answer. */
export interface WaitForUser {
  readonly [WAIT_FOR_USER]: true;
  readonly question: string;
}

export function waitForUser(question: string): WaitForUser {
  return { [WAIT_FOR_USER]: true, question };
}

const OUTSIDE_ANSWER = Symbol('cairn.outsideAnswer');

/**
 * Returned by a tool that Cairn does not run itself (an OpenAI client's own
 * tool): the loop runs the turn's other calls, then stops with this call open;
 * its result arrives with a later request.
 */
export interface OutsideAnswer {
  readonly [OUTSIDE_ANSWER]: true;
}

export function outsideAnswer(): OutsideAnswer {
  return { [OUTSIDE_ANSWER]: true };
}

export function isOutsideAnswer(value: unknown): value is OutsideAnswer {
  return typeof value === 'object' && value !== null && OUTSIDE_ANSWER in value;
}

export function isWaitForUser(value: unknown): value is WaitForUser {
  return typeof value === 'object' && value !== null && WAIT_FOR_USER in value;
}
