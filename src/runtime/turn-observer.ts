/**
 * What the runtime reports about its own work beside the event log: each
 * tool result and each finished chat turn. Metrics and the info log listen
 * here, so the loop and the turn engine carry no metrics or logging code.
 */
import { CairnError } from '../errors.js';
import type { InfoLogger } from './event-log.js';

/** The tool of a call whose name the agent does not offer (the model made it up). */
export const UNKNOWN_TOOL = 'unknown';

export interface ToolResultNote {
  agentName: string;
  /** The called tool's name, or UNKNOWN_TOOL when the agent offers no tool of that name. */
  tool: string;
  /** The tool failed, timed out, was unknown or got arguments not matching its schema. */
  isError: boolean;
}

export interface ChatTurnNote {
  /** Absent when the turn failed before it had a session (unknown agent or session). */
  sessionId?: string;
  agentName: string;
  /** `answer`, `waiting` (ask_user), `pending` (approval) or `error`. */
  outcome: 'answer' | 'waiting' | 'pending' | 'error';
  durationMs: number;
  /** The CairnError code when `outcome` is `error`. */
  errorCode?: string;
}

export interface TurnObserver {
  toolResult?(note: ToolResultNote): void;
  chatTurn?(note: ChatTurnNote): void;
}

/** How a turn whose client went away is reported: not a server failure. */
export const CLIENT_DISCONNECTED = 'CLIENT_DISCONNECTED';

/**
 * The error code of a failed turn, for the log line (never its message: it
 * may echo input). A turn that stopped because its caller's `signal` aborted
 * (the client disconnected) is CLIENT_DISCONNECTED, not INTERNAL.
 */
export function errorCodeOf(err: unknown, signal?: AbortSignal): string {
  if (err instanceof CairnError) return err.code;
  return signal?.aborted === true ? CLIENT_DISCONNECTED : 'INTERNAL';
}

/** Logs every chat turn once at info with its ids, outcome and duration. */
export function chatTurnLogger(info: InfoLogger): (note: ChatTurnNote) => void {
  return (note) => info({ event: 'chat.turn', ...note }, 'chat.turn');
}
