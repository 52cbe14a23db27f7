/**
 * Automatic recall: before each model call of a session with compacted
 * messages or cleared tool results, search the compacted raw messages (seq ≤
 * the compaction pointer) and the old tool results the call sends as
 * placeholders with the newest user message, and the latest tool result
 * inside a tool loop, and put the best matches in the request as one
 * `<recalled_messages>` data block. One indexed query per call; the block is bounded by the
 * agent's `defaultCompaction.recall` and by the room the window has left, so
 * it never pushes a request over the window. It never repeats what the
 * request holds: the tail is everything after the pointer, and the search
 * stops at it, except for the tail's cleared results, which it does not hold.
 */
import type { ChatMessage } from '../llm/messages.js';
import { CHARS_PER_TOKEN, estimateMessagesTokens, estimateTextTokens } from '../llm/tokens.js';
import type { ContextRecall, GuardedTurn, RecallDone } from '../runtime/context-guard.js';
import { storedClearedResults, type ClearedToolResult } from '../runtime/tool-result-clearing.js';
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
import { fuseCandidates, type VectorRecall } from './hybrid-recall.js';
import {
  asksQuestion,
  mayCompleteEarlier,
  timeScopeOf,
  recallScore,
  recallTerms,
  refersBack,
  isStopWord,
  refersToNext,
  type RecallTerm,
} from './recall-query.js';
import { markSuperseded } from './superseded.js';

/** Share of the window a request with recall may fill when automatic compaction is off (autoThreshold 0). */
export const RECALL_CEILING_PERCENT = 90;
/** Below this many tokens of room, a clipped item is not worth sending. */
export const MIN_ITEM_TOKENS = 48;
/** Next messages read per call, at most, for recalled messages that announce them. */
const MAX_NEIGHBOURS = 3;
/** Messages after a recalled one searched for its speaker's next. */
const NEIGHBOUR_LOOKAHEAD = 3;
/** Candidates read per wanted message: some fall below minScore or outside the budget. */
const CANDIDATES_PER_MESSAGE = 3;

export interface AutomaticRecallDeps {
  store: Pick<MessageLog, 'recallMessages' | 'listMessages'> &
    Partial<Pick<MessageLog, 'correctRecallTerms'>>;
  /** Context window of the main model, in tokens. */
  contextWindow: number;
  /** The prompt tokens of the turn's next call with `messages` (the context guard's estimate). */
  estimate: (turn: GuardedTurn, messages: readonly ChatMessage[]) => Promise<number>;
  ledger: RecallLedger;
  /** The vector half of hybrid recall; absent when no `embed` role is configured. */
  vectors?: Pick<VectorRecall, 'candidates'>;
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
   * `items` with the other half of a fact split over two messages: right
   * after one that says its answer is in the next message ("the path is in
   * my next message"), that next message; right before one that is the
   * announced answer, or that refers back to what the speaker just said
   * ("that was the address of the warehouse"), that earlier message. A
   * message already there is not repeated; at most MAX_NEIGHBOURS reads a
   * call.
   */
  private async withNeighbours(
    sessionId: string,
    items: readonly RecalledItem[],
    pointer: number,
  ): Promise<RecalledItem[]> {
    const out: RecalledItem[] = [];
    const seen = new Set(items.map((item) => item.seq));
    let reads = 0;
    for (const item of items) {
      if (reads < MAX_NEIGHBOURS && item.seq > 1 && mayCompleteEarlier(item.text)) {
        reads += 1;
        const before = await previousMessage(this.deps.store, sessionId, item);
        if (before && !seen.has(before.seq)) {
          seen.add(before.seq);
          out.push(before);
        }
      }
      out.push(item);
      if (reads >= MAX_NEIGHBOURS || !(refersToNext(item.text) || asksQuestion(item.text)))
        continue;
      reads += 1;
      const next = await nextMessage(this.deps.store, sessionId, item, pointer);
      if (next && !seen.has(next.seq)) {
        seen.add(next.seq);
        out.push(next);
      }
    }
    return out;
  }

  /**
   * In hybrid mode, `lexical` fused with the compacted messages nearest the
   * user's message in meaning (hybrid-recall.ts); the lexical list as it is
   * otherwise, or when the embedding provider fails.
   */
  private async withVectors(
    turn: GuardedTurn,
    userText: string,
    lexical: RecallHit[],
    pointer: number,
  ): Promise<RecallHit[]> {
    const vectors = this.deps.vectors;
    const settings = turn.agent.defaultCompaction.recall;
    if (!vectors || settings.mode === 'lexical' || userText.trim() === '') return lexical;
    const found = await vectors.candidates(
      turn.session,
      userText,
      pointer,
      settings.maxMessages * CANDIDATES_PER_MESSAGE,
    );
    return found ? fuseCandidates(lexical, found) : lexical;
  }

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
    const cleared = turn.clearing?.plan(messages) ?? [];
    if (!settings.enabled || (pointer <= 0 && cleared.length === 0)) {
      ledger?.set(turn.session.id, 0);
      return none;
    }
    const query = recallQueryOf(messages);
    // A date in the question scopes the search in time; its words are not searched.
    const scope = query ? timeScopeOf(query.user) : undefined;
    const userWords = scope?.rest ?? query?.user ?? '';
    // A misspelled word is searched and scored as the word the history
    // holds, unless that word is one recall never searches ("cover" is one
    // edit from "over").
    const corrected = async (found: RecallTerm[]) => {
      if (!this.deps.store.correctRecallTerms || found.length === 0 || pointer <= 0) return found;
      const fixed = await this.deps.store.correctRecallTerms(turn.session.id, found, pointer);
      // `found`'s terms first, each corrected or not, then any added besides.
      return fixed.flatMap((term, i) => {
        if (!isStopWord(term.text)) return [term];
        return i < found.length ? [found[i]!] : [];
      });
    };
    const terms = await corrected(
      query ? recallTerms(userWords, query.toolResult, query.previousUser) : [],
    );
    // A follow-up's own terms score as well: the earlier message's terms
    // widen the search, they do not make a match of the follow-up harder.
    const own = await corrected(query ? recallTerms(userWords, query.toolResult) : []);
    const score = (content: string) =>
      Math.max(recallScore(terms, content), own.length > 0 ? recallScore(own, content) : 0);
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
      scope?.period,
    );
    const lexical = hits
      .filter((hit) => hit.content.trim() !== '')
      .filter((hit) => score(hit.content) >= settings.minScore);
    const fused = await this.withVectors(
      turn,
      query?.user ?? '',
      relativeCut(lexical, settings.minRelativeScore),
      pointer,
    );
    const kept = withClearedResults(
      fused.map(toItem),
      await clearedCandidates(turn, messages, cleared, score, settings.minScore),
      score,
    ).slice(0, settings.maxMessages);
    const ranked = (await this.withNeighbours(turn.session.id, kept, pointer)).slice(
      0,
      settings.maxMessages,
    );
    const fitted = fitItems(ranked, budget, estimateTextTokens).sort((a, b) => a.seq - b.seq);
    const items = markSuperseded(fitted, terms);
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

/** Stored tool messages read at most to find the cleared results' seqs. */
const CLEARED_LOOKUP_LIMIT = 10_000;

/**
 * The old tool results the call sends cleared that match the query: the
 * request holds only their placeholders, so they are searched like compacted
 * messages (in memory: they are in the raw tail the turn has loaded), scored
 * as the store's hits are and kept at the same minimum score.
 */
async function clearedCandidates(
  turn: GuardedTurn,
  messages: readonly ChatMessage[],
  cleared: readonly ClearedToolResult[],
  score: (content: string) => number,
  minScore: number,
): Promise<{ item: RecalledItem; score: number }[]> {
  // The latest tool result is part of the query: it would only find itself.
  const latest = messages.findLastIndex((m) => m.role === 'tool');
  const matching = cleared.filter(
    (r) => r.index !== latest && score(messages[r.index]?.content ?? '') >= minScore,
  );
  if (matching.length === 0) return [];
  const stored = await turn.messagesAfter(turn.session.compact_seq, CLEARED_LOOKUP_LIMIT);
  return storedClearedResults(matching, stored).map(({ message }) => ({
    item: {
      seq: message.seq,
      role: message.role,
      created_at: message.created_at,
      text: message.content ?? '',
    },
    score: score(message.content ?? ''),
  }));
}

/**
 * The store's hits (in their own order) with the matching cleared results
 * placed among them by score: each before the first hit that scores lower.
 */
function withClearedResults(
  hits: readonly RecalledItem[],
  cleared: readonly { item: RecalledItem; score: number }[],
  score: (content: string) => number,
): RecalledItem[] {
  if (cleared.length === 0) return [...hits];
  const out = [...hits];
  const scores = hits.map((hit) => score(hit.text));
  for (const candidate of [...cleared].sort((a, b) => b.score - a.score)) {
    let at = scores.findIndex((s) => s < candidate.score);
    if (at < 0) at = out.length;
    out.splice(at, 0, candidate.item);
    scores.splice(at, 0, candidate.score);
  }
  return out;
}

/**
 * The message that answers with `item`: the next one, or, when the item
 * speaks of "my next message", the speaker's own next one among the
 * NEIGHBOUR_LOOKAHEAD after it (the other side's reply comes between). Only
 * compacted, non-system messages with text.
 */
async function nextMessage(
  store: Pick<MessageLog, 'listMessages'>,
  sessionId: string,
  item: RecalledItem,
  pointer: number,
): Promise<RecalledItem | undefined> {
  const after = await store.listMessages(sessionId, {
    afterSeq: item.seq,
    limit: NEIGHBOUR_LOOKAHEAD,
  });
  const own = /\bmy (next|following)\b/i.test(item.text);
  const next = after.find(
    (message) =>
      message.seq <= pointer &&
      message.role !== 'system' &&
      (message.content ?? '').trim() !== '' &&
      (!own || message.role === item.role),
  );
  if (!next) return undefined;
  return { seq: next.seq, role: next.role, created_at: next.created_at, text: next.content ?? '' };
}

/**
 * The hits (best first) whose score is at least `share` of the best one's:
 * an item earns its place against the best match, so one strong match does
 * not come with five that merely share a word with the question.
 */
export function relativeCut(hits: readonly RecallHit[], share: number): RecallHit[] {
  const best = hits.reduce((top, hit) => Math.max(top, hit.score), 0);
  if (best <= 0) return [...hits];
  return hits.filter((hit) => hit.score >= share * best);
}

/**
 * The earlier half of a fact `item` completes: the speaker's own message
 * among the NEIGHBOUR_LOOKAHEAD before it, when `item` refers back to it
 * (refersBack) or it announced its answer in the next message (refersToNext).
 */
async function previousMessage(
  store: Pick<MessageLog, 'listMessages'>,
  sessionId: string,
  item: RecalledItem,
): Promise<RecalledItem | undefined> {
  const before = await store.listMessages(sessionId, {
    afterSeq: Math.max(0, item.seq - NEIGHBOUR_LOOKAHEAD - 1),
    limit: NEIGHBOUR_LOOKAHEAD,
  });
  const own = before
    .filter(
      (message) =>
        message.seq < item.seq &&
        message.role === item.role &&
        (message.content ?? '').trim() !== '',
    )
    .at(-1);
  if (!own) return undefined;
  if (!refersBack(item.text) && !refersToNext(own.content ?? '')) return undefined;
  return { seq: own.seq, role: own.role, created_at: own.created_at, text: own.content ?? '' };
}

function toItem(hit: RecallHit): RecalledItem {
  return { seq: hit.seq, role: hit.role, created_at: hit.created_at, text: hit.content };
}
