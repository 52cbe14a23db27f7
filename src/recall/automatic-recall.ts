/**
 * Automatic recall: before each model call of a session with compacted
 * messages, search the compacted raw messages (seq ≤ the compaction pointer)
 * with the newest user message, and the latest tool result inside a tool
 * loop, and put the best matches in the request as one `<recalled_messages>`
 * data block. One indexed query per call; the block is bounded by the
 * agent's `defaultCompaction.recall` and by the room the window has left, so
 * it never pushes a request over the window. It never repeats the raw tail:
 * the tail is everything after the pointer, and the search stops at it.
 */
import type { ChatMessage } from '../llm/messages.js';
import { CHARS_PER_TOKEN, estimateMessagesTokens, estimateTextTokens } from '../llm/tokens.js';
import type { ContextRecall, GuardedTurn, RecallDone } from '../runtime/context-guard.js';
import type { MessageLog, RecallHit } from '../store/store.js';
import {
  injectRecall,
  recallQueryOf,
  renderItem,
  renderRecallBlock,
  RECALL_FRAME_CHARS,
  type RecalledItem,
} from './recall-block.js';
import type { RecallLedger } from './recall-ledger.js';
import { recallScore, recallTerms } from './recall-query.js';

/** Share of the window a request with recall may fill when automatic compaction is off (autoThreshold 0). */
export const RECALL_CEILING_PERCENT = 90;
/** Below this many tokens of room, a clipped item is not worth sending. */
export const MIN_ITEM_TOKENS = 48;
/** Candidates read per wanted message: some fall below minScore or outside the budget. */
const CANDIDATES_PER_MESSAGE = 3;

export interface AutomaticRecallDeps {
  store: Pick<MessageLog, 'recallMessages'>;
  /** Context window of the main model, in tokens. */
  contextWindow: number;
  /** The prompt tokens of the turn's next call with `messages` (the context guard's estimate). */
  estimate: (turn: GuardedTurn, messages: readonly ChatMessage[]) => Promise<number>;
  ledger: RecallLedger;
}

/** What `AutomaticRecall.recall` adds to one call. */
export interface RecallOutcome {
  messages: ChatMessage[];
  /** The block added, and what it holds; null when nothing was recalled. */
  done: (RecallDone & { block: ChatMessage }) | null;
}

/** The tokens a call may spend on recall: its own cap, and what the window has left. */
export function recallBudget(input: {
  maxTokens: number;
  contextWindow: number;
  /** The agent's autoThreshold; 0 (off) or absent: RECALL_CEILING_PERCENT. */
  autoThreshold: number | undefined;
  promptTokens: number;
}): number {
  const threshold =
    input.autoThreshold !== undefined && input.autoThreshold > 0
      ? input.autoThreshold
      : RECALL_CEILING_PERCENT;
  const percent = Math.min(threshold, RECALL_CEILING_PERCENT);
  const ceiling = Math.floor((input.contextWindow * percent) / 100);
  return Math.max(0, Math.min(input.maxTokens, ceiling - input.promptTokens));
}

/**
 * The items that fit `budget` tokens with the block's frame, best first, the
 * last one clipped when enough room is left for it. Pure; `countText`
 * replaces estimateTextTokens (a memo of it: the same counts).
 */
export function fitItems(
  hits: readonly RecalledItem[],
  budget: number,
  countText: (text: string) => number = estimateTextTokens,
): RecalledItem[] {
  let left = budget - countText(renderRecallBlock([])) - 4;
  const out: RecalledItem[] = [];
  for (const hit of hits) {
    const cost = countText(renderItem(hit)) + 1;
    if (cost <= left) {
      out.push(hit);
      left -= cost;
      continue;
    }
    if (left >= MIN_ITEM_TOKENS) {
      const frame = renderItem({ ...hit, text: '' }).length;
      const chars = Math.max(0, (left - 2) * CHARS_PER_TOKEN - frame);
      const clipped = { ...hit, text: `${hit.text.slice(0, chars)}…` };
      if (countText(renderItem(clipped)) + 1 <= left) out.push(clipped);
    }
    break;
  }
  return out;
}

export class AutomaticRecall implements ContextRecall {
  constructor(private readonly deps: AutomaticRecallDeps) {}

  /**
   * The call's messages with the recalled block, if anything matched and
   * fits. A `preview` (the context view) leaves the ledger alone: no call carries it.
   */
  async recall(
    turn: GuardedTurn,
    messages: ChatMessage[],
    options: { preview?: boolean } = {},
  ): Promise<RecallOutcome> {
    const settings = turn.agent.defaultCompaction.recall;
    const pointer = turn.session.compact_seq;
    const none: RecallOutcome = { messages, done: null };
    const ledger = options.preview ? undefined : this.deps.ledger;
    if (!settings.enabled || pointer <= 0) {
      ledger?.set(turn.session.id, 0);
      return none;
    }
    const query = recallQueryOf(messages);
    const terms = query ? recallTerms(query.user, query.toolResult) : [];
    const promptTokens = await this.deps.estimate(turn, messages);
    // The estimate must not count the last call's block: it is replaced, not kept.
    ledger?.set(turn.session.id, 0);
    const budget = recallBudget({
      maxTokens: settings.maxTokens,
      contextWindow: this.deps.contextWindow,
      autoThreshold: turn.agent.defaultCompaction.autoThreshold,
      promptTokens,
    });
    if (terms.length === 0 || budget < MIN_ITEM_TOKENS + RECALL_FRAME_CHARS / CHARS_PER_TOKEN)
      return none;

    const hits = await this.deps.store.recallMessages(
      turn.session.id,
      terms,
      pointer,
      settings.maxMessages * CANDIDATES_PER_MESSAGE,
    );
    const ranked = hits
      .filter((hit) => hit.content.trim() !== '')
      .filter((hit) => recallScore(terms, hit.content) >= settings.minScore)
      .slice(0, settings.maxMessages)
      .map(toItem);
    const items = fitItems(ranked, budget, estimateTextTokens).sort((a, b) => a.seq - b.seq);
    if (items.length === 0) return none;
    const block: ChatMessage = { role: 'user', content: renderRecallBlock(items) };
    const tokens = estimateMessagesTokens([block]);
    ledger?.set(turn.session.id, tokens);
    return {
      messages: injectRecall(messages, block),
      done: { seqs: items.map((item) => item.seq), tokens, block },
    };
  }
}

function toItem(hit: RecallHit): RecalledItem {
  return { seq: hit.seq, role: hit.role, created_at: hit.created_at, text: hit.content };
}
