/**
 * Building the context of a model call, in one place (DESIGN §4, §5.2): the
 * system messages (plus build-time context such as memory notes), the rolling
 * summary standing in for the compacted prefix as a user + assistant pair,
 * and the raw tail. The summary lives in memory only; it is never persisted.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { ChatMessage, StoredMessage } from '../llm/messages.js';
import type { MessageLog, SessionRow } from '../store/store.js';

export const SUMMARY_PREFIX = '[Summary of previous conversation]\n\n';
export const SUMMARY_ACK = 'Understood. I have the context from the summary above.';

/**
 * `system` are the system messages, `tail` the non-system messages after the
 * pointer. With no summary the messages are returned unchanged. The
 * acknowledgement is left out when the tail starts with an assistant message,
 * so roles still alternate. Pure.
 */
export function buildMessagesWithSummary(
  system: readonly ChatMessage[],
  tail: readonly ChatMessage[],
  summary: string | null,
): ChatMessage[] {
  return [...system, ...summaryMessages(summary, tail[0]), ...tail];
}

/** The injected pair (or the lone summary when `firstOfTail` is an assistant message). Pure. */
export function summaryMessages(
  summary: string | null,
  firstOfTail: ChatMessage | undefined,
): ChatMessage[] {
  if (summary === null || summary === '') return [];
  const pair: ChatMessage[] = [{ role: 'user', content: SUMMARY_PREFIX + summary }];
  if (firstOfTail?.role !== 'assistant') pair.push({ role: 'assistant', content: SUMMARY_ACK });
  return pair;
}

export function toChatMessage(message: StoredMessage): ChatMessage {
  const out: ChatMessage = { role: message.role, content: message.content };
  if (message.tool_calls) out.tool_calls = message.tool_calls;
  if (message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id;
  if (message.name !== undefined) out.name = message.name;
  return out;
}

/** A built context, with the parts the context view counts apart. */
export interface BuiltContext {
  messages: ChatMessage[];
  /** The stored non-system messages the context holds raw. */
  tail: StoredMessage[];
  /** The summary the context injects (null: none). */
  summary: string | null;
  /** The build-time system context (memory notes) on its own. */
  memory: string | undefined;
}

export interface ContextBuilderDeps {
  store: Pick<MessageLog, 'loadContext'>;
  /** Adds memory notes or other build-time context to the system messages. */
  systemContext?: (agent: AgentConfig) => Promise<string | undefined>;
}

export class ContextBuilder {
  constructor(private readonly deps: ContextBuilderDeps) {}

  /**
   * The context the next model call on `session` gets. `replace` stands an
   * in-memory summary in for the session's summary and every stored message
   * before `fromSeq` (the overflow fallback, which keeps the running turn raw).
   */
  async build(
    session: SessionRow,
    agent: AgentConfig,
    replace?: { summary: string; fromSeq: number },
  ): Promise<BuiltContext> {
    const loaded = await this.deps.store.loadContext(session.id, session.compact_seq);
    const tail = replace ? loaded.tail.filter((m) => m.seq >= replace.fromSeq) : loaded.tail;
    const summary = replace ? replace.summary : session.compact_summary;
    const system: ChatMessage[] = loaded.system.map(toChatMessage);
    const memory = this.deps.systemContext ? await this.deps.systemContext(agent) : undefined;
    if (memory) system.push({ role: 'system', content: memory });
    return {
      messages: buildMessagesWithSummary(system, tail.map(toChatMessage), summary),
      tail,
      summary,
      memory,
    };
  }
}
