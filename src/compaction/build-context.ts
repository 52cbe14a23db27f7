/**
 * Summary injection (DESIGN §5.2): the rolling summary stands in for the
 * compacted prefix as a user + assistant pair right after the system
 * messages. In memory only; never persisted. Pure.
 */
import type { ChatMessage } from '../llm/messages.js';

export const SUMMARY_PREFIX = '[Summary of previous conversation]\n\n';
export const SUMMARY_ACK = 'Understood. I have the context from the summary above.';

/**
 * `system` are the system messages, `tail` the non-system messages after the
 * pointer. With no summary the messages are returned unchanged. The
 * acknowledgement is left out when the tail starts with an assistant message,
 * so roles still alternate.
 */
export function buildMessagesWithSummary(
  system: readonly ChatMessage[],
  tail: readonly ChatMessage[],
  summary: string | null,
): ChatMessage[] {
  return [...system, ...summaryMessages(summary, tail[0]), ...tail];
}

/** The injected pair (or the lone summary when `firstOfTail` is an assistant message). */
export function summaryMessages(
  summary: string | null,
  firstOfTail: ChatMessage | undefined,
): ChatMessage[] {
  if (summary === null || summary === '') return [];
  const pair: ChatMessage[] = [{ role: 'user', content: SUMMARY_PREFIX + summary }];
  if (firstOfTail?.role !== 'assistant') pair.push({ role: 'assistant', content: SUMMARY_ACK });
  return pair;
}
