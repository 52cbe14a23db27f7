/**
 * AG-UI's RunAgentInput read against a Cairn session, as pure functions: the
 * body checked with @ag-ui/core's own schema, then what is new in it. A client
 * posts its whole copy of the thread; Cairn holds the history already, so only
 * the newest user message is read, or, when the session waits on a tool call
 * (an approval or an `ask_user` question), the resume entry answering the
 * interrupt the last run finished with. Decisions and answers come from the
 * entry's structured payload, never from message text.
 */
import { contentToText, type Interrupt, type RunAgentInput } from '@ag-ui/core';
import { RunAgentInputSchema } from '@ag-ui/core/schemas';
import { CairnError } from '../errors.js';
import type { ChatMessage, ToolCall } from '../llm/messages.js';
import { callInput, type OpenCall } from '../ai-sdk/ui-messages.js';

/** The interrupt reasons Cairn finishes a run with. */
export const APPROVAL_REASON = 'tool_approval';
export const ASK_USER_REASON = 'ask_user';

/** What a run asks for, read from its input. */
export type RunInput =
  | { kind: 'message'; text: string }
  /** The user's answer to the open `ask_user` call. */
  | { kind: 'answer'; result: ChatMessage; callId: string }
  /** A person's decision on the open call awaiting approval. */
  | { kind: 'approval'; call: ToolCall; approved: boolean; reason?: string };

function invalid(message: string): CairnError {
  return new CairnError('VALIDATION_ERROR', message);
}

/** The posted body as AG-UI's RunAgentInput; 400 `VALIDATION_ERROR` naming the first bad field. */
export function parseRunInput(body: unknown): RunAgentInput {
  const parsed = RunAgentInputSchema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const at = issue && issue.path.length > 0 ? `body.${issue.path.join('.')}` : 'body';
  throw invalid(`${at}: ${issue?.message ?? 'not a RunAgentInput'}.`);
}

/** The interrupt of a run that stopped on `ask_user`: the payload to resume with is `{answer}`. */
export function questionInterrupt(callId: string, question: string): Interrupt {
  return {
    id: callId,
    reason: ASK_USER_REASON,
    message: question,
    toolCallId: callId,
    responseSchema: {
      type: 'object',
      properties: { answer: { type: 'string' } },
      required: ['answer'],
    },
  };
}

/** The interrupt of a run that stopped on a call awaiting approval: resume with `{approved, reason?}`. */
export function approvalInterrupt(call: ToolCall): Interrupt {
  return {
    id: call.id,
    reason: APPROVAL_REASON,
    message: `Allow ${call.function.name} with ${call.function.arguments}?`,
    toolCallId: call.id,
    responseSchema: {
      type: 'object',
      properties: { approved: { type: 'boolean' }, reason: { type: 'string' } },
      required: ['approved'],
    },
    metadata: { tool: call.function.name, arguments: callInput(call) },
  };
}

function answerMessage(call: ToolCall, content: string): ChatMessage {
  return { role: 'tool', tool_call_id: call.id, name: call.function.name, content };
}

/** The decision or answer the resume entry for `open` carries. */
function resumed(input: RunAgentInput, open: OpenCall): RunInput {
  const { call } = open;
  const entry = input.resume?.find((e) => e.interruptId === call.id);
  if (entry === undefined)
    throw invalid(
      `The thread waits on interrupt "${call.id}" (${open.waitsFor === 'answer' ? ASK_USER_REASON : APPROVAL_REASON}): answer it in body.resume.`,
    );
  const payload = entry.payload as { approved?: unknown; reason?: unknown; answer?: unknown };
  if (open.waitsFor === 'answer') {
    if (entry.status === 'cancelled')
      return {
        kind: 'answer',
        callId: call.id,
        result: answerMessage(call, 'The user did not answer.'),
      };
    if (typeof payload?.answer !== 'string')
      throw invalid(`The resume entry for "${call.id}" needs payload {answer: string}.`);
    return { kind: 'answer', callId: call.id, result: answerMessage(call, payload.answer) };
  }
  if (entry.status === 'cancelled') return { kind: 'approval', call, approved: false };
  if (typeof payload?.approved !== 'boolean')
    throw invalid(`The resume entry for "${call.id}" needs payload {approved: boolean, reason?}.`);
  return {
    kind: 'approval',
    call,
    approved: payload.approved,
    ...(typeof payload.reason === 'string' ? { reason: payload.reason } : {}),
  };
}

/**
 * What is new in `input`, given the call the session waits on (if any): the
 * resume entry answering it, or else the last message, which must be a user
 * message with text. 400 `VALIDATION_ERROR` otherwise.
 */
export function newRunInput(input: RunAgentInput, open: OpenCall | undefined): RunInput {
  if (open !== undefined) return resumed(input, open);
  if (input.resume?.length)
    throw invalid(
      `body.resume answers interrupt "${input.resume[0]!.interruptId}", but the thread waits on none.`,
    );
  const last = input.messages.at(-1);
  if (last?.role !== 'user')
    throw invalid(
      last === undefined
        ? 'body.messages is empty: post the thread with the new user message last.'
        : `The last message is a ${last.role} message; post a user message last.`,
    );
  const text = contentToText(last.content);
  if (text.trim() === '') throw invalid('The last user message has no text.');
  return { kind: 'message', text };
}
