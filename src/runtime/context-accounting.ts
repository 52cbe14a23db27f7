/**
 * What the next model call's context costs, part by part (`GET
 * /sessions/:id/context`): system prompt, memory notes, summary and raw tail,
 * counted by the one token estimator over exactly what the model is sent
 * (old tool results as their placeholders, listed apart).
 */
import type { ChatMessage } from '../llm/messages.js';
import { normalizeOutgoing } from '../llm/normalize-request.js';
import { estimateMessagesTokens } from '../llm/tokens.js';
import {
  summaryMessages,
  type BuiltContext,
  type ClearedToolResultView,
} from './context-builder.js';

export interface ContextAccount {
  /** The messages as the model would get them (normalized). */
  messages: ChatMessage[];
  tokens: {
    system: number;
    memory: number;
    summary: number;
    raw: number;
    /** The recalled block the newest user message gets (not in `messages`, which stay the stable prefix). */
    recall: number;
    total: number;
  };
  /** Seqs of the compacted messages that block holds. */
  recalled: number[];
  /** Old tool results sent as placeholders, oldest first (`tokens`: their stored size). */
  clearedToolResults: ClearedToolResultView[];
}

export function accountContext(built: BuiltContext): ContextAccount {
  const messages = normalizeOutgoing(built.messages);
  // Memory notes travel as a system message; counted apart from the prompt.
  const memory = built.memory
    ? estimateMessagesTokens([{ role: 'system', content: built.memory }])
    : 0;
  const system = estimateMessagesTokens(messages.filter((m) => m.role === 'system')) - memory;
  const summary = estimateMessagesTokens(summaryMessages(built.summary, built.tail[0]));
  const stable = estimateMessagesTokens(messages);
  const recall = built.recall?.tokens ?? 0;
  return {
    messages,
    tokens: {
      system,
      memory,
      summary,
      raw: stable - system - memory - summary,
      recall,
      total: stable + recall,
    },
    recalled: built.recall?.seqs ?? [],
    clearedToolResults: built.cleared ?? [],
  };
}
