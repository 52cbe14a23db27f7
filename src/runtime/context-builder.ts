/**
 * Building the context of a model call, in one place: the
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
  /**
   * What automatic recall adds for the newest user message (the context
   * view's preview; a model call places the block right before that message).
   */
  recall?: { block: ChatMessage; seqs: number[]; tokens: number };
  /**
   * Old tool results `messages` send as placeholders (the context view's
   * list; `tokens` is the size of the stored text).
   */
  cleared?: ClearedToolResultView[];
}

/** One cleared tool result as the context view lists it. */
export interface ClearedToolResultView {
  seq: number;
  toolCallId: string;
  tool: string;
  tokens: number;
}

export interface ContextBuilderDeps {
  store: Pick<MessageLog, 'loadContext'>;
  /** Adds memory notes or other build-time context to the system messages. */
  systemContext?: (agent: AgentConfig) => Promise<string | undefined>;
  /** Sessions whose loaded messages are kept between turns (least recently used dropped). */
  maxCachedSessions?: number;
}

/** How many sessions' loaded messages are kept in memory by default (40-message tails are small). */
export const DEFAULT_MAX_CACHED_SESSIONS = 500;

/** A longer raw tail (a session that is never compacted) is reloaded each turn rather than held. */
export const MAX_CACHED_TAIL_MESSAGES = 2_000;

/** A session's stored messages as last loaded, and the state they were loaded at. */
interface Loaded {
  epoch: number;
  compactSeq: number;
  /** The highest seq the messages account for: any append after it invalidates them. */
  lastSeq: number;
  system: StoredMessage[];
  tail: StoredMessage[];
  /**
   * The wire form of each of `system` and `tail`, made once when the message
   * was loaded or appended, not again at every turn. (Nothing downstream
   * edits a context's messages.)
   */
  systemForms: ChatMessage[];
  tailForms: ChatMessage[];
}

/**
 * Builds contexts, and keeps each session's loaded messages between turns so a
 * turn appends to them instead of reloading the tail. They are used only while
 * the session's epoch (reset), compaction pointer and last seq are the ones
 * they were loaded or last appended at; anything else reloads from the store.
 */
export class ContextBuilder {
  private readonly loaded = new Map<string, Loaded>();
  private readonly maxCached: number;

  constructor(private readonly deps: ContextBuilderDeps) {
    this.maxCached = deps.maxCachedSessions ?? DEFAULT_MAX_CACHED_SESSIONS;
  }

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
    const loaded = await this.load(session);
    // The tail is in seq order: what the replacement keeps is a suffix of it.
    const kept = replace ? loaded.tail.findIndex((m) => m.seq >= replace.fromSeq) : 0;
    const from = kept === -1 ? loaded.tail.length : kept;
    const tail = loaded.tail.slice(from);
    const summary = replace ? replace.summary : session.compact_summary;
    const system = [...loaded.systemForms];
    const memory = this.deps.systemContext ? await this.deps.systemContext(agent) : undefined;
    if (memory) system.push({ role: 'system', content: memory });
    return {
      messages: buildMessagesWithSummary(system, loaded.tailForms.slice(from), summary),
      tail,
      summary,
      memory,
    };
  }

  /**
   * Messages just stored on a session (by the turn holding its slot): kept
   * with its loaded messages when they directly follow them, else those are dropped.
   */
  appended(sessionId: string, messages: readonly StoredMessage[]): void {
    const loaded = this.loaded.get(sessionId);
    const first = messages[0];
    if (!loaded || !first) return;
    if (first.seq !== loaded.lastSeq + 1) {
      this.loaded.delete(sessionId);
      return;
    }
    for (const message of messages) {
      if (message.role === 'system') {
        loaded.system.push(message);
        loaded.systemForms.push(toChatMessage(message));
      } else {
        loaded.tail.push(message);
        loaded.tailForms.push(toChatMessage(message));
      }
      loaded.lastSeq = message.seq;
    }
  }

  /**
   * The stored non-system messages after `seq` from memory, when the session's
   * loaded messages are still those at `epoch` and `compactSeq` and cover `seq`.
   */
  loadedAfter(
    sessionId: string,
    state: { epoch: number; compactSeq: number },
    seq: number,
  ): StoredMessage[] | undefined {
    const loaded = this.loaded.get(sessionId);
    if (!loaded || loaded.epoch !== state.epoch || loaded.compactSeq !== state.compactSeq)
      return undefined;
    if (seq < loaded.compactSeq) return undefined;
    return loaded.tail.filter((m) => m.seq > seq);
  }

  private async load(session: SessionRow): Promise<Loaded> {
    const kept = this.loaded.get(session.id);
    if (
      kept &&
      kept.epoch === session.epoch &&
      kept.compactSeq === session.compact_seq &&
      kept.lastSeq === session.last_seq
    ) {
      // Most recently used last, so the first key is the one to drop.
      this.loaded.delete(session.id);
      this.loaded.set(session.id, kept);
      return kept;
    }
    const { system, tail } = await this.deps.store.loadContext(session.id, session.compact_seq);
    const loaded: Loaded = {
      epoch: session.epoch,
      compactSeq: session.compact_seq,
      lastSeq: session.last_seq,
      system,
      tail,
      systemForms: system.map(toChatMessage),
      tailForms: tail.map(toChatMessage),
    };
    this.loaded.delete(session.id);
    // Something stored after the session row was read: not known to be whole, so not kept.
    const newest = Math.max(system.at(-1)?.seq ?? 0, tail.at(-1)?.seq ?? 0);
    if (newest <= session.last_seq && tail.length <= MAX_CACHED_TAIL_MESSAGES) {
      this.loaded.set(session.id, loaded);
      if (this.loaded.size > this.maxCached) {
        const oldest = this.loaded.keys().next().value;
        if (oldest !== undefined) this.loaded.delete(oldest);
      }
    }
    return loaded;
  }
}
