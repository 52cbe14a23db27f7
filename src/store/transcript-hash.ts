/**
 * The visible-transcript hash chain (DESIGN §10). The visible transcript of a
 * session is what a chat UI shows and resends: user messages and the
 * assistant's final texts (no tool calls, no tool results, no system
 * messages). Each visible message's hash covers everything visible before it,
 * so one hash names one whole transcript and a resent history is matched to
 * its session with one indexed lookup instead of a scan. Pure.
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

/** The chain hash of a whole message list (non-visible messages are skipped); null when nothing is visible. */
export function transcriptHash(
  messages: readonly Pick<ChatMessage, 'role' | 'content' | 'tool_calls'>[],
): string | null {
  let hash: string | null = null;
  for (const message of messages) if (isVisible(message)) hash = nextTranscriptHash(hash, message);
  return hash;
}
