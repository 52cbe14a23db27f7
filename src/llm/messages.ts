/**
 * The message shapes Cairn stores and sends: the OpenAI chat-completions
 * vocabulary, which every supported provider speaks.
 */

export type Role = 'system' | 'user' | 'assistant' | 'tool';

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: Role;
  /** Text; `null` only for an assistant message that carries tool calls. */
  content: string | null;
  tool_calls?: ToolCall[];
  /** Set on `tool` messages: the call this message answers. */
  tool_call_id?: string;
  /** Set on `tool` messages: the tool's name. */
  name?: string;
}

/** A message as stored: its per-session sequence number and creation time. */
export interface StoredMessage extends ChatMessage {
  session_id: string;
  seq: number;
  created_at: string;
  /**
   * The message's token estimate (src/llm/tokens.ts), stored once when it was
   * written. Set on context reads (loadContext, listTail) and on what
   * appendMessages returns; absent for rows written before it was stored:
   * estimate those.
   */
  tokens?: number;
}

export interface TokenUsage {
  input_tokens: number;
  output_tokens: number;
  /** What the calls cost by the role's pricing; absent when none was priced. */
  cost?: number;
  /** Of input_tokens, those read from the provider's prompt cache (absent: none reported). */
  cache_read_tokens?: number;
  /** Of input_tokens, those written to the provider's prompt cache. */
  cache_write_tokens?: number;
}

/** A function tool as offered to the model. */
export interface ToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the arguments object. */
  parameters: Record<string, unknown>;
}

/**
 * A message's size for compaction's length-based cut: content length plus, for
 * each tool call, the function name and arguments length.
 */
export function messageChars(message: Pick<ChatMessage, 'content' | 'tool_calls'>): number {
  let chars = message.content?.length ?? 0;
  for (const call of message.tool_calls ?? [])
    chars += call.function.name.length + call.function.arguments.length;
  return chars;
}
