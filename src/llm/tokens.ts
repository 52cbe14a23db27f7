/**
 * Token estimates for context accounting (auto-compaction, GET /context).
 * Uses the cl100k tokenizer: for any particular model it is an estimate,
 * which is all the threshold needs, and its tables take ~39 MB where
 * o200k's take ~63 MB of a server that should idle under 100 MB.
 */
import { createRequire } from 'node:module';
import type { ChatMessage } from './messages.js';

type CountTokens = (text: string) => number;
let countTokens: CountTokens | undefined;

/**
 * The tables load on the first estimate, not at start-up (a quarter second
 * and tens of MB that a server without autoThreshold may never need).
 */
function tokenizer(): CountTokens {
  countTokens ??= (
    createRequire(import.meta.url)('gpt-tokenizer/cjs/encoding/cl100k_base') as {
      countTokens: CountTokens;
    }
  ).countTokens;
  return countTokens;
}

/** Per-message framing tokens the chat format adds around each message. */
export const MESSAGE_OVERHEAD_TOKENS = 4;

/**
 * Long texts are counted in slices of this many characters. BPE is quadratic
 * in the length of a run without spaces (300 000 'x' took ~2 minutes whole,
 * 3 ms sliced); slicing changes the count of ordinary prose by well under 1 %.
 */
export const ESTIMATE_SLICE_CHARS = 1_000;

export function estimateTextTokens(text: string): number {
  if (text.length === 0) return 0;
  const count = tokenizer();
  if (text.length <= ESTIMATE_SLICE_CHARS) return count(text);
  let tokens = 0;
  for (let at = 0; at < text.length; at += ESTIMATE_SLICE_CHARS) {
    tokens += count(text.slice(at, at + ESTIMATE_SLICE_CHARS));
  }
  return tokens;
}

export function estimateMessageTokens(message: ChatMessage): number {
  let tokens = MESSAGE_OVERHEAD_TOKENS + estimateTextTokens(message.content ?? '');
  for (const call of message.tool_calls ?? []) {
    tokens +=
      estimateTextTokens(call.function.name) + estimateTextTokens(call.function.arguments) + 3;
  }
  return tokens;
}

export function estimateMessagesTokens(messages: readonly ChatMessage[]): number {
  let total = 0;
  for (const message of messages) total += estimateMessageTokens(message);
  return total;
}
