/**
 * Token estimates for context accounting (auto-compaction, GET /context).
 * Uses the o200k tokenizer of current OpenAI models; for other models it is an
 * estimate, which is all the threshold needs.
 */
import { createRequire } from 'node:module';
import type { ChatMessage, ToolSpec } from './messages.js';

type CountTokens = (text: string) => number;
let countTokens: CountTokens | undefined;

/**
 * The tokenizer's tables take ~50 MB and a second to load, so they load on
 * the first estimate, not at start-up (a server without autoThreshold may
 * never need them).
 */
function tokenizer(): CountTokens {
  countTokens ??= (createRequire(import.meta.url)('gpt-tokenizer') as { countTokens: CountTokens })
    .countTokens;
  return countTokens;
}

/** Per-message framing tokens the chat format adds around each message. */
export const MESSAGE_OVERHEAD_TOKENS = 4;

export function estimateTextTokens(text: string): number {
  return text.length === 0 ? 0 : tokenizer()(text);
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

export function estimateToolsTokens(tools: readonly ToolSpec[]): number {
  return tools.length === 0 ? 0 : estimateTextTokens(JSON.stringify(tools));
}
