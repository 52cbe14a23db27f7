/**
 * The visible-transcript hash chain, how an OpenAI client that resends the
 * whole history each turn finds its session without a scan. The visible
 * transcript of a session is what a chat UI shows and resends: user messages
 * and the assistant's final texts (no tool calls, no tool results, no system
 * messages). Each visible message's hash covers everything visible before it,
 * so one hash names one whole transcript and a resent history is matched to its
 * session with one indexed lookup instead of a scan. Pure.
 */
import { createHash } from 'node:crypto';
import type { ChatMessage } from '../llm/messages.js';

/** The message is part of the visible transcript: a user message or a final assistant text. */
export function isVisible(message: Pick<ChatMessage, 'role' | 'content' | 'tool_calls'>): boolean {
  if (message.content === null || message.content.trim() === '') return false;
  if (message.role === 'user') return true;
  return message.role === 'assistant' && !message.tool_calls?.length;
}

/** The chain hash after `message`, given the hash before it (null for an empty transcript). */
export function nextTranscriptHash(
  previous: string | null,
  message: Pick<ChatMessage, 'role' | 'content'>,
): string {
  // JSON keeps the three parts apart whatever characters they hold.
  return createHash('sha256')
    .update(JSON.stringify([previous ?? '', message.role, message.content ?? '']))
    .digest('base64url');
}

/**
 * The chain hash of a whole message list (non-visible messages are skipped),
 * starting from `seed`; `seed` (null by default) when nothing is visible.
 */
export function transcriptHash(
  messages: readonly Pick<ChatMessage, 'role' | 'content' | 'tool_calls'>[],
  seed: string | null = null,
): string | null {
  let hash = seed;
  for (const message of messages) if (isVisible(message)) hash = nextTranscriptHash(hash, message);
  return hash;
}

/**
 * Where the chain of a conversation posted by an API client starts: its
 * scope (the client key and end user) and every system or developer message
 * it posted, with where each stood among the other messages. Two
 * conversations that differ in any of these never share a chain. Null for
 * the admin with no end user and no instructions, whose chain starts empty
 * as it always did.
 */
export function transcriptSeed(
  scope: { key: string | null; user: string | null },
  instructions: readonly { position: number; content: string | null }[],
): string | null {
  if (scope.key === null && scope.user === null && instructions.length === 0) return null;
  return createHash('sha256')
    .update(
      JSON.stringify([
        'scope',
        scope.key ?? '',
        scope.user ?? '',
        instructions.map((m) => [m.position, m.content ?? '']),
      ]),
    )
    .digest('base64url');
}
