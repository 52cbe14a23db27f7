/**
 * Old tool results cleared from a request (`defaultCompaction.pruneToolResults`):
 * a tool result that is not among the `keepLast` newest and is longer than
 * `minTokens` goes out as a one-line placeholder naming the tool, the call and
 * its size. Only the request changes: the stored message stays whole, so
 * recall can bring it back and the pairing of call and result is untouched
 * (the result keeps its role, call id and name; only its text is shorter).
 *
 * Results are cleared in batches, not one by one: clearing a result changes
 * the request from that result on, so a provider's prompt cache, which reads
 * a request's unchanged prefix, misses everything after it. Clearing each old
 * result as soon as it falls out of the newest `keepLast` would move that
 * point at nearly every call. Instead the clearable results wait until
 * together they are worth at least `batchTokens` (a tenth of the window, at
 * least `minTokens`), then all of them go at once, and the prefix stays put
 * until the next batch is worth it.
 *
 * Which results are cleared is a pure function of the tool results in the
 * request, in order, so every call, every instance and the context view
 * agree without remembering anything: the batches are replayed from the
 * first result on (as if the results had arrived one by one), and since a
 * request only ever grows between compactions, a result once cleared stays
 * cleared.
 */
import type { PruneToolResults } from '../agents/agent-config.js';
import type { ChatMessage, StoredMessage } from '../llm/messages.js';
import { estimateTextTokens } from '../llm/tokens.js';

/** Clearable results wait until together they are worth this share of the context window. */
export const CLEARING_BATCH_SHARE = 0.1;

/**
 * A UTF-16 code unit is at most three tokens (three UTF-8 bytes, each at most
 * one token), so a text of up to `minTokens / 3` units is never counted.
 */
const MAX_TOKENS_PER_CHAR = 3;

export interface ClearingPolicy extends PruneToolResults {
  /** Clearable results are cleared once together they hold at least this many tokens. */
  readonly batchTokens: number;
  /** Automatic recall is on, so the placeholder may promise it brings the result back. */
  readonly recallable: boolean;
}

/** The policy of an agent's setting with a window of `contextWindow` tokens; null when off. */
export function clearingPolicy(
  setting: PruneToolResults | false,
  contextWindow: number,
  recallable: boolean,
): ClearingPolicy | null {
  if (setting === false) return null;
  const batchTokens = Math.max(setting.minTokens, Math.floor(contextWindow * CLEARING_BATCH_SHARE));
  return { ...setting, batchTokens, recallable };
}

/** One tool result a request sends as a placeholder. */
export interface ClearedToolResult {
  /** Where it is in the messages the plan was made from. */
  readonly index: number;
  readonly toolCallId: string;
  readonly tool: string;
  /** Tokens of its text, as stored. */
  readonly tokens: number;
}

/**
 * How many of the leading tool results are in the cleared zone, given each
 * result's tokens (0 for one that is not clearable: at most `minTokens`). The
 * results are replayed one by one: after each, the clearable results between
 * the zone and the newest `keepLast` are cleared together once they hold at
 * least `batchTokens`. Pure.
 */
export function clearedZone(tokens: readonly number[], policy: ClearingPolicy): number {
  let zone = 0;
  let waiting = 0;
  for (let count = 1; count <= tokens.length; count++) {
    // The result that just left the newest keepLast joins the waiting ones.
    const leaving = count - policy.keepLast - 1;
    if (leaving >= zone && leaving >= 0) waiting += tokens[leaving]!;
    if (waiting > 0 && waiting >= policy.batchTokens) {
      zone = count - policy.keepLast;
      waiting = 0;
    }
  }
  return zone;
}

/**
 * Plans which tool results of a request go out cleared, counting each
 * result's text once per message object (a turn sees the same messages at
 * every call).
 */
export class ToolResultClearing {
  private readonly counted = new WeakMap<ChatMessage, number>();

  constructor(readonly policy: ClearingPolicy) {}

  /** The tool results of `messages` that are sent as placeholders, oldest first. */
  plan(messages: readonly ChatMessage[]): ClearedToolResult[] {
    const results: { index: number; tokens: number }[] = [];
    messages.forEach((message, index) => {
      if (message.role === 'tool') results.push({ index, tokens: this.clearableTokens(message) });
    });
    const zone = clearedZone(
      results.map((r) => r.tokens),
      this.policy,
    );
    const cleared: ClearedToolResult[] = [];
    for (const { index, tokens } of results.slice(0, zone)) {
      if (tokens === 0) continue;
      const message = messages[index]!;
      cleared.push({
        index,
        toolCallId: message.tool_call_id ?? '',
        tool: message.name ?? 'tool',
        tokens,
      });
    }
    return cleared;
  }

  /** `messages` as sent: each cleared result's text replaced by its placeholder (a new array). */
  apply(messages: readonly ChatMessage[], cleared: readonly ClearedToolResult[]): ChatMessage[] {
    if (cleared.length === 0) return [...messages];
    const out = [...messages];
    for (const result of cleared) {
      out[result.index] = { ...messages[result.index]!, content: this.placeholder(result) };
    }
    return out;
  }

  /** Tokens the request saves by sending `cleared` as placeholders. */
  savedTokens(cleared: readonly ClearedToolResult[]): number {
    let saved = 0;
    for (const result of cleared) {
      saved += Math.max(0, result.tokens - estimateTextTokens(this.placeholder(result)));
    }
    return saved;
  }

  /** The one line a cleared result is sent as. */
  placeholder(result: Pick<ClearedToolResult, 'tool' | 'toolCallId' | 'tokens'>): string {
    const where = this.policy.recallable
      ? 'Its full text is kept: automatic recall brings it back when a later message asks for what it held.'
      : 'Its full text is kept in the conversation history.';
    return `[Old tool result cleared from this request: ${result.tool} (call ${result.toolCallId}), ${result.tokens} tokens. ${where}]`;
  }

  /** The text's tokens when it is longer than minTokens, else 0 (not clearable). */
  private clearableTokens(message: ChatMessage): number {
    const known = this.counted.get(message);
    if (known !== undefined) return known;
    const text = message.content ?? '';
    const tokens =
      text.length * MAX_TOKENS_PER_CHAR <= this.policy.minTokens ? 0 : estimateTextTokens(text);
    const clearable = tokens > this.policy.minTokens ? tokens : 0;
    this.counted.set(message, clearable);
    return clearable;
  }
}

/**
 * The stored message each cleared result was made from: matched by call id,
 * walking both in order (the request's tool results are the stored ones
 * after the pointer, in seq order), so a call id used twice still finds its
 * own result. Results with no stored message (not stored yet) are left out.
 */
export function storedClearedResults(
  cleared: readonly ClearedToolResult[],
  stored: readonly StoredMessage[],
): { result: ClearedToolResult; message: StoredMessage }[] {
  const out: { result: ClearedToolResult; message: StoredMessage }[] = [];
  let at = 0;
  for (const result of cleared) {
    let found = -1;
    for (let i = at; i < stored.length; i++) {
      const message = stored[i]!;
      if (message.role === 'tool' && message.tool_call_id === result.toolCallId) {
        found = i;
        break;
      }
    }
    if (found < 0) continue;
    out.push({ result, message: stored[found]! });
    at = found + 1;
  }
  return out;
}
