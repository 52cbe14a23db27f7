/**
 * The one normaliser every outgoing model request passes through, whatever
 * built it. It repairs the wire copy so a provider never sees an invalid
 * sequence: missing tool results are filled with an "interrupted" error,
 * orphan tool results are dropped, empty texts are never sent, and tool-call
 * ids longer than providers accept are shortened consistently on both sides,
 * and tool-call arguments that are not a JSON object are replayed as `{}`.
 * Pure: the caller decides which repairs to persist.
 */
import { createHash } from 'node:crypto';
import type { ChatMessage, ToolCall } from './messages.js';

/** OpenAI rejects tool-call ids longer than this. */
export const MAX_TOOL_CALL_ID_CHARS = 40;
export const EMPTY_TOOL_RESULT = '(the tool returned no output)';
export const INTERRUPTED_TOOL_RESULT =
  'Error: this tool call was interrupted before it returned a result (the server stopped or the call was cancelled). Its outcome is unknown; check before repeating it.';
/**
 * Put before a history whose first non-system message calls tools (its prompt
 * was blank and dropped): providers require the exchange to start from a prompt.
 */
export const LEADING_TOOL_CALL_BRIDGE = '(Earlier messages of this conversation are not shown.)';

export function interruptedResult(call: ToolCall): ChatMessage {
  return {
    role: 'tool',
    tool_call_id: call.id,
    name: call.function.name,
    content: INTERRUPTED_TOOL_RESULT,
  };
}

/** A stable short id for an over-long or foreign one: same input, same output. */
export function normalizeToolCallId(id: string): string {
  if (id.length > 0 && id.length <= MAX_TOOL_CALL_ID_CHARS && /^[A-Za-z0-9_-]+$/.test(id))
    return id;
  return `call_${createHash('sha256').update(id).digest('base64url').slice(0, 32)}`;
}

/**
 * Arguments as a provider accepts them on replay: a JSON object text. What the
 * model sent that is not one (`{"key":`, `""`, `[1]`) is replayed as `{}`; the
 * call's error result already told the model what was wrong, and the stored
 * raw text stays for the record. Replaying it as-is would make the provider
 * reject every later request of the session.
 */
export function wireArguments(raw: string): string {
  try {
    const value: unknown = JSON.parse(raw);
    if (typeof value === 'object' && value !== null && !Array.isArray(value)) return raw;
  } catch {
    // not JSON: replaced below
  }
  return '{}';
}

function isBlank(text: string | null | undefined): boolean {
  if (text === null || text === undefined) return true;
  // Most texts start with a printable ASCII character: no need to trim a copy of them.
  const first = text.charCodeAt(0);
  if (first > 32 && first < 127) return false;
  return text.trim() === '';
}

/** A message whose only own keys are `role` and `content` (counted without allocating). */
function isPlain(message: ChatMessage): boolean {
  let keys = 0;
  for (const key in message) {
    if (key !== 'role' && key !== 'content') return false;
    keys += 1;
  }
  return keys === 2;
}

/**
 * Returns a provider-valid copy of `messages`: a new array, whose messages
 * are new objects where anything changed (a plain message already valid is
 * the same object). The input is not modified.
 */
export function normalizeOutgoing(messages: readonly ChatMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  let i = 0;
  while (i < messages.length) {
    const message = messages[i]!;
    i += 1;
    if (message.role === 'tool') continue; // orphan: its call is not right before it
    if (message.role === 'assistant' && message.tool_calls && message.tool_calls.length > 0) {
      const calls = message.tool_calls.map((c) => ({
        ...c,
        id: normalizeToolCallId(c.id),
        function: { ...c.function, arguments: wireArguments(c.function.arguments) },
      }));
      // Collect the results that follow, keeping the first per open call.
      const results = new Map<string, ChatMessage>();
      while (i < messages.length && messages[i]!.role === 'tool') {
        const result = messages[i]!;
        i += 1;
        const id = normalizeToolCallId(result.tool_call_id ?? '');
        if (calls.some((c) => c.id === id) && !results.has(id)) {
          results.set(id, {
            role: 'tool',
            tool_call_id: id,
            ...(result.name !== undefined ? { name: result.name } : {}),
            content: isBlank(result.content) ? EMPTY_TOOL_RESULT : result.content,
          });
        }
      }
      out.push({
        role: 'assistant',
        content: isBlank(message.content) ? null : message.content,
        tool_calls: calls,
      });
      for (const call of calls)
        out.push(results.get(call.id) ?? { ...interruptedResult(call), tool_call_id: call.id });
      continue;
    }
    if (isBlank(message.content)) continue; // nothing empty is sent
    // Already as sent (a role and a text, nothing else): the same object, so
    // whoever compares this request with the previous one finds it unchanged
    // at a glance (the call records' delta, the offline model's token count).
    out.push(isPlain(message) ? message : { role: message.role, content: message.content });
  }
  const first = out.findIndex((m) => m.role !== 'system');
  if (first >= 0 && out[first]!.tool_calls)
    out.splice(first, 0, { role: 'user', content: LEADING_TOOL_CALL_BRIDGE });
  return out;
}

/**
 * The synthetic results to persist for calls of the last assistant message
 * that have none (a crash or cancel mid-tool), except `pending` ids (an
 * `ask_user` call that is waiting for its answer, not missing it).
 */
export function missingTrailingResults(
  messages: readonly ChatMessage[],
  pending: ReadonlySet<string> = new Set(),
): ChatMessage[] {
  let index = messages.length - 1;
  while (index >= 0 && messages[index]!.role === 'tool') index -= 1;
  const assistant = messages[index];
  if (!assistant || assistant.role !== 'assistant' || !assistant.tool_calls?.length) return [];
  const answered = new Set(messages.slice(index + 1).map((m) => m.tool_call_id));
  return assistant.tool_calls
    .filter((c) => !answered.has(c.id) && !pending.has(c.id))
    .map(interruptedResult);
}
