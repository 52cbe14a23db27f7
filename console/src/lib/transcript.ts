/**
 * The transcript as blocks to render: text messages, and tool calls folded
 * together with their results; the compacted prefix apart from the live tail.
 */
import type { Message } from './types';

export type Block =
  | { kind: 'text'; seq: number; role: 'system' | 'user' | 'assistant'; text: string }
  | {
      kind: 'tool';
      seq: number;
      callId: string;
      name: string;
      arguments: string;
      /** Absent while the tool runs (or when the result was never stored). */
      result?: { content: string; seq: number };
    };

export interface TranscriptModel {
  /** The system prompt snapshot(s). */
  system: Block[];
  /** Messages the summary stands in for (never deleted, just not sent). */
  compacted: Block[];
  /** What the model still sees raw. */
  live: Block[];
}

function toBlocks(messages: readonly Message[]): Block[] {
  const blocks: Block[] = [];
  const calls = new Map<string, Extract<Block, { kind: 'tool' }>>();
  for (const message of messages) {
    if (message.role === 'tool') {
      const call = message.tool_call_id ? calls.get(message.tool_call_id) : undefined;
      const result = { content: message.content ?? '', seq: message.seq };
      if (call) call.result = result;
      else
        blocks.push({
          kind: 'tool',
          seq: message.seq,
          callId: message.tool_call_id ?? '',
          name: message.name ?? 'tool',
          arguments: '',
          result,
        });
      continue;
    }
    if (message.content) {
      blocks.push({ kind: 'text', seq: message.seq, role: message.role, text: message.content });
    }
    for (const call of message.tool_calls ?? []) {
      const block = {
        kind: 'tool' as const,
        seq: message.seq,
        callId: call.id,
        name: call.function.name,
        arguments: call.function.arguments,
      };
      calls.set(call.id, block);
      blocks.push(block);
    }
  }
  return blocks;
}

export function transcriptModel(messages: readonly Message[]): TranscriptModel {
  return {
    system: toBlocks(messages.filter((m) => m.role === 'system')),
    compacted: toBlocks(messages.filter((m) => m.role !== 'system' && m.compacted)),
    live: toBlocks(messages.filter((m) => m.role !== 'system' && !m.compacted)),
  };
}

/** The divider's words, also its accessible name. */
export function summaryCoversLabel(count: number): string {
  return `Summary covers ${count} ${count === 1 ? 'message' : 'messages'}`;
}

/**
 * When the raw tail after a compaction does not start with a user message,
 * the exchange it belongs to began in the compacted prefix: a sentence that
 * says where the rest of it is. Undefined when the tail starts cleanly (or
 * nothing was compacted).
 */
export function tailStartNote(
  messages: readonly Message[],
  compactSize: number,
): string | undefined {
  if (compactSize === 0) return undefined;
  const first = messages.find((m) => m.role !== 'system' && !m.compacted);
  if (!first || first.role === 'user') return undefined;
  const where = 'is in the summary above (open the compacted messages to read it)';
  if (first.role === 'tool')
    return `This part starts with a tool result: the call it answers ${where}.`;
  if ((first.tool_calls ?? []).length > 0)
    return `This part starts with a tool call: the request that led to it ${where}.`;
  return `This part starts with a reply: the message it answers ${where}.`;
}

/**
 * A tool's arguments or result for reading: JSON indented, anything else as
 * it came (a model may send arguments that are not JSON).
 */
export function readableToolText(text: string): string {
  const trimmed = text.trim();
  if (!trimmed.startsWith('{') && !trimmed.startsWith('[')) return text;
  try {
    return JSON.stringify(JSON.parse(trimmed), null, 2);
  } catch {
    return text;
  }
}
