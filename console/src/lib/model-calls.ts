/**
 * "What the model saw": which model call produced each assistant message of a
 * transcript, and what each message of a recorded request is (the summary
 * pair, recalled messages, memory notes, the system prompt, or the
 * conversation itself). Pure, so it is tested without a browser.
 */
import type { Message, ToolCall } from './types';

/** A model-call record as `GET /sessions/:id/calls` lists it. */
export interface CallSummary {
  id: string;
  role: 'main' | 'compact' | 'title';
  turn_seq: number | null;
  model: string;
  created_at: string;
  latency_ms: number;
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  cost: number | null;
  finish_reason: string | null;
  response: { content: string | null; tool_calls?: ToolCall[] } | null;
  error: { code: string; message: string } | null;
}

/** A message of a recorded request, in the provider's wire shape. */
export interface SentMessage {
  role: string;
  content?: unknown;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

/** `GET /calls/:id`: the summary plus the request as sent. */
export interface CallRecord extends CallSummary {
  request: { messages?: SentMessage[]; tools?: unknown[]; [key: string]: unknown };
  wire: boolean;
}

/** The markers the server puts on what it injects (see the context builder and memory). */
const SUMMARY_PREFIX = '[Summary of previous conversation]';
const SUMMARY_ACK = 'Understood. I have the context from the summary above.';
const MEMORY_OPEN = '<memory_notes>';
const RECALL_OPEN = '<recalled_messages>';

export type SentKind = 'system' | 'memory' | 'summary' | 'recall' | 'conversation';

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .map((part: unknown) =>
        typeof part === 'object' && part !== null && 'text' in part ? String(part.text) : '',
      )
      .join('');
  return '';
}

/** What one message of a request is, for marking it in the view. */
export function sentKind(message: SentMessage): SentKind {
  const text = textOf(message.content);
  if (text.includes(MEMORY_OPEN)) return 'memory';
  if (text.includes(RECALL_OPEN)) return 'recall';
  if (text.startsWith(SUMMARY_PREFIX) || (message.role === 'assistant' && text === SUMMARY_ACK))
    return 'summary';
  if (message.role === 'system' || message.role === 'developer') return 'system';
  return 'conversation';
}

export function sentText(message: SentMessage): string {
  const text = textOf(message.content);
  const calls = (message.tool_calls ?? [])
    .map((c) => `→ ${c.function.name}(${c.function.arguments})`)
    .join('\n');
  return [text, calls].filter((part) => part !== '').join('\n');
}

function sameReply(call: CallSummary, message: Message): boolean {
  const response = call.response;
  if (!response) return false;
  const ids = (response.tool_calls ?? []).map((c) => c.id).join(',');
  const messageIds = (message.tool_calls ?? []).map((c) => c.id).join(',');
  if (ids !== messageIds) return false;
  if (ids !== '') return true;
  return (response.content ?? '') === (message.content ?? '');
}

/**
 * The main-role call behind each assistant message, by seq. Calls and
 * messages are matched in order, each call at most once: a call whose reply
 * was not stored (an empty reply that was retried, a failed call) is skipped.
 */
export function callsByMessage(
  messages: readonly Message[],
  calls: readonly CallSummary[],
): Map<number, CallSummary> {
  const ordered = calls
    .filter((c) => c.role === 'main')
    .sort((a, b) =>
      a.created_at === b.created_at ? (a.id < b.id ? -1 : 1) : a.created_at < b.created_at ? -1 : 1,
    );
  const found = new Map<number, CallSummary>();
  let next = 0;
  for (const message of messages) {
    if (message.role !== 'assistant') continue;
    for (let i = next; i < ordered.length; i++) {
      const call = ordered[i]!;
      if (call.turn_seq !== null && call.turn_seq > message.seq) break;
      if (sameReply(call, message)) {
        found.set(message.seq, call);
        next = i + 1;
        break;
      }
    }
  }
  return found;
}

/** `1 840 in (1 536 cached) · 62 out · $0.000513 · 812 ms`. */
export function callLine(call: CallSummary): string {
  const parts: string[] = [];
  if (call.input_tokens !== null) {
    const cached = call.cached_tokens
      ? ` (${call.cached_tokens.toLocaleString('en-US')} cached)`
      : '';
    parts.push(`${call.input_tokens.toLocaleString('en-US')} in${cached}`);
  }
  if (call.output_tokens !== null) parts.push(`${call.output_tokens.toLocaleString('en-US')} out`);
  if (call.cost !== null) parts.push(`cost ${formatCost(call.cost)}`);
  parts.push(`${Math.round(call.latency_ms).toLocaleString('en-US')} ms`);
  return parts.join(' · ');
}

/** A cost with enough digits to see small calls (currency as configured, no symbol). */
export function formatCost(cost: number): string {
  if (cost === 0) return '0';
  return cost >= 0.01 ? cost.toFixed(4) : cost.toPrecision(3);
}
