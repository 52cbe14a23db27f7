/**
 * Providers' wire quirks beyond the OpenAI rules, applied by the model
 * adapter to the copy it sends, never to the stored history.
 */
import type { ChatMessage } from './messages.js';

/** The assistant turn Mistral-style providers need between tool results and a user message. */
export const TOOL_TO_USER_BRIDGE = 'I have the tool results.';

/**
 * For providers that reject `tool → user` (Mistral and some vLLM chat
 * templates): inserts a short assistant message between them.
 */
export function bridgeToolToUser(messages: readonly ChatMessage[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  messages.forEach((message, i) => {
    out.push(message);
    if (message.role === 'tool' && messages[i + 1]?.role === 'user') {
      out.push({ role: 'assistant', content: TOOL_TO_USER_BRIDGE });
    }
  });
  return out;
}
