/**
 * The AI SDK's UI messages on Cairn's stored messages, both ways, as pure
 * functions: a session's history as the `UIMessage`s `useChat` shows (one
 * assistant message per run of assistant and tool messages between two user
 * messages), and of the messages a client posts, what is new — the newest
 * user message, or the answer to the session's open tool call (an
 * `ask_user` result or an approval response). Everything else a client
 * posts is its copy of the history, which Cairn already holds.
 */
import type { UIMessage } from 'ai';
import { CairnError } from '../errors.js';
import type { ChatMessage, StoredMessage, ToolCall } from '../llm/messages.js';
import type { MessageMeta } from '../store/store.js';

/** The tool whose calls the front-end answers: its result is the user's answer. */
export const ASK_USER_TOOL = 'ask_user';

type UIPart = UIMessage['parts'][number];

/** A message as the client posted it, after the route's schema checked its shape. */
export interface PostedMessage {
  id: string;
  role: 'system' | 'user' | 'assistant';
  parts: readonly ({ type: string } & Record<string, unknown>)[];
}

/** The tool call a session waits on: its last assistant message's call without a result. */
export interface OpenCall {
  call: ToolCall;
  /** `ask_user` waits for the user's answer; any other tool for a person's approval. */
  waitsFor: 'answer' | 'approval';
}

/** What a request asks for, read from the messages it posted. */
export type ChatInput =
  /** A user message; `forkBefore` set when it replaces stored ones (an edit or a regenerate). */
  | { kind: 'message'; text: string; forkBefore?: number }
  /** The user's answer to the open `ask_user` call. */
  | { kind: 'answer'; result: ChatMessage; callId: string }
  /** A person's decision on the open call awaiting approval. */
  | { kind: 'approval'; call: ToolCall; approved: boolean; reason?: string };

/** The UI message id of a stored message: stable, so a reloaded page keeps its ids. */
export function uiMessageId(seq: number): string {
  return `msg-${seq}`;
}

/** The arguments of a call as the UI shows its input: parsed JSON, or the text when it is not JSON. */
export function callInput(call: ToolCall): unknown {
  try {
    return JSON.parse(call.function.arguments) as unknown;
  } catch {
    return call.function.arguments;
  }
}

/** A tool part of the given state (the SDK's static tool parts are typed `tool-<name>`). */
function toolPart(call: ToolCall, rest: Record<string, unknown>): UIPart {
  return {
    type: `tool-${call.function.name}`,
    toolCallId: call.id,
    input: callInput(call),
    ...rest,
  } as UIPart;
}

/**
 * The session's messages as UI messages: system messages left out, each
 * assistant run one message of text and tool parts; the calls still open at
 * the end wait for an answer (`ask_user`: `input-available`) or for approval
 * (`approval-requested`, the approval id being the call id).
 */
export function toUIMessages(stored: readonly StoredMessage[]): UIMessage[] {
  const out: UIMessage[] = [];
  let assistant:
    { message: UIMessage; calls: Map<string, { call: ToolCall; index: number }> } | undefined;
  for (const message of stored) {
    if (message.role === 'system') continue;
    if (message.role === 'user') {
      assistant = undefined;
      out.push({
        id: uiMessageId(message.seq),
        role: 'user',
        parts: [{ type: 'text', text: message.content ?? '' }],
      });
      continue;
    }
    if (assistant === undefined) {
      assistant = {
        message: { id: uiMessageId(message.seq), role: 'assistant', parts: [] },
        calls: new Map(),
      };
      out.push(assistant.message);
    }
    const parts = assistant.message.parts;
    if (message.role === 'assistant') {
      parts.push({ type: 'step-start' });
      if (message.content) parts.push({ type: 'text', text: message.content, state: 'done' });
      for (const call of message.tool_calls ?? []) {
        assistant.calls.set(call.id, { call, index: parts.length });
        parts.push(
          call.function.name === ASK_USER_TOOL
            ? toolPart(call, { state: 'input-available' })
            : toolPart(call, { state: 'approval-requested', approval: { id: call.id } }),
        );
      }
      continue;
    }
    // A tool result settles its call's part.
    const open =
      message.tool_call_id === undefined ? undefined : assistant.calls.get(message.tool_call_id);
    if (open === undefined) continue;
    parts[open.index] = toolPart(open.call, {
      state: 'output-available',
      output: message.content ?? '',
    });
    assistant.calls.delete(open.call.id);
  }
  return out;
}

/** The call the session's last assistant message left without a result, if any. */
export function openCallOf(tail: readonly StoredMessage[]): OpenCall | undefined {
  const lastAssistant = tail.findLastIndex((m) => m.role === 'assistant' || m.role === 'user');
  const last = tail[lastAssistant];
  if (last?.role !== 'assistant' || !last.tool_calls?.length) return undefined;
  const answered = new Set(tail.slice(lastAssistant + 1).map((m) => m.tool_call_id));
  const call = last.tool_calls.find((c) => !answered.has(c.id));
  if (call === undefined) return undefined;
  return { call, waitsFor: call.function.name === ASK_USER_TOOL ? 'answer' : 'approval' };
}

function invalid(message: string): CairnError {
  return new CairnError('VALIDATION_ERROR', message);
}

/** The text of a user message's text parts (files and data parts are not read). */
function userText(message: PostedMessage): string {
  return message.parts
    .filter((p) => p.type === 'text' && typeof p.text === 'string')
    .map((p) => p.text as string)
    .join('\n');
}

/** What an answer to a tool call reads as: text as it is, anything else as JSON. */
function outputText(output: unknown): string {
  return typeof output === 'string' ? output : JSON.stringify(output ?? null);
}

/**
 * What is new in `posted`, given the seqs of the session's stored user
 * messages (`users`, oldest first), the session's open call, and the
 * request's trigger. A user message that comes with fewer user messages
 * before it than the session holds replaces the one at its position: the
 * session forks before it (`forkBefore`, that message's seq). 400
 * `VALIDATION_ERROR` when nothing new was posted.
 */
export function newInput(
  posted: readonly PostedMessage[],
  users: readonly number[],
  open: OpenCall | undefined,
  trigger: 'submit-message' | 'regenerate-message',
): ChatInput {
  const last = posted.at(-1);
  if (last === undefined) throw invalid("body.messages is empty: post the chat's messages.");
  if (last.role === 'user') {
    const text = userText(last);
    if (text.trim() === '')
      throw invalid(
        'The last message has no text part: send the user message as {type: "text", text}.',
      );
    const before = posted.slice(0, -1).filter((m) => m.role === 'user').length;
    const replaced = users[before];
    return replaced !== undefined
      ? { kind: 'message', text, forkBefore: replaced }
      : { kind: 'message', text };
  }
  if (last.role !== 'assistant')
    throw invalid(
      `The last message is a ${last.role} message; post a user message or an answer to a tool call.`,
    );
  if (trigger === 'regenerate-message')
    throw invalid(
      'A regenerate posts the messages up to the user message to answer again, not an assistant message.',
    );
  if (open === undefined)
    throw invalid(
      'The last message is an assistant message, but the chat waits for no tool result or approval.',
    );
  const part = last.parts.find((p) => p.toolCallId === open.call.id);
  if (open.waitsFor === 'answer') {
    if (part?.state === 'output-available')
      return {
        kind: 'answer',
        callId: open.call.id,
        result: answerMessage(open.call, outputText(part.output)),
      };
    if (part?.state === 'output-error')
      return {
        kind: 'answer',
        callId: open.call.id,
        result: answerMessage(open.call, `The user did not answer: ${outputText(part.errorText)}`),
      };
    throw invalid(
      `The chat waits for the answer to ${ASK_USER_TOOL} call "${open.call.id}": add it with addToolOutput.`,
    );
  }
  const approval = part?.approval as
    { id?: unknown; approved?: unknown; reason?: unknown } | undefined;
  if (part?.state !== 'approval-responded' || typeof approval?.approved !== 'boolean')
    throw invalid(
      `The chat waits for approval of call "${open.call.id}" (${open.call.function.name}): answer it with addToolApprovalResponse.`,
    );
  if (approval.id !== open.call.id)
    throw invalid(
      `The approval response names approval "${String(approval.id)}"; the open one is "${open.call.id}".`,
    );
  return {
    kind: 'approval',
    call: open.call,
    approved: approval.approved,
    ...(typeof approval.reason === 'string' ? { reason: approval.reason } : {}),
  };
}

function answerMessage(call: ToolCall, content: string): ChatMessage {
  return { role: 'tool', tool_call_id: call.id, name: call.function.name, content };
}

/** The seqs of the user messages among `meta`, oldest first. */
export function userSeqs(meta: readonly MessageMeta[]): number[] {
  return meta.filter((m) => m.role === 'user').map((m) => m.seq);
}

/** Where to fork so the session ends just before message `seq`: the seq before it, or 0 for none. */
export function forkPointBefore(meta: readonly MessageMeta[], seq: number): number {
  let at = 0;
  for (const m of meta) if (m.seq < seq) at = m.seq;
  return at;
}
