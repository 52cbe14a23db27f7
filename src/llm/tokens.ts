/**
 * The one token estimator (auto-compaction, GET /context, the offline
 * model's usage, compaction budgets). Uses the cl100k tokenizer: for any particular model it is an estimate,
 * which is all the threshold needs, and its tables take ~39 MB where
 * o200k's take ~63 MB of a server that should idle under 100 MB.
 */
import { createRequire } from 'node:module';
import type { ChatMessage } from './messages.js';

type CountTokens = (text: string) => number;
let countTokens: CountTokens | undefined;

/**
 * Special-token text (`<|endoftext|>`, `<|im_start|>` …) in a message is
 * counted as the plain text it is, as a provider tokenizes a user's words.
 * The tokenizer's default throws on it instead, which turned a chat that
 * merely mentions one into an internal error.
 */
const PLAIN_TEXT_ONLY = Object.freeze({ disallowedSpecial: new Set<string>() });

/**
 * The tables load on the first estimate, not at start-up (a quarter second
 * and tens of MB that a server without autoThreshold may never need).
 */
function tokenizer(): CountTokens {
  if (countTokens === undefined) {
    const encoding = createRequire(import.meta.url)('gpt-tokenizer/cjs/encoding/cl100k_base') as {
      countTokens: (text: string, options: typeof PLAIN_TEXT_ONLY) => number;
    };
    countTokens = (text) => encoding.countTokens(text, PLAIN_TEXT_ONLY);
  }
  return countTokens;
}

/** Per-message framing tokens the chat format adds around each message. */
export const MESSAGE_OVERHEAD_TOKENS = 4;

/**
 * Characters per token where there is no text to count yet (a character cap
 * turned into `max_tokens`, a token budget into characters). Cautious: real
 * text runs 3.5 to 4.5, so a budget sized with it is not overrun.
 */
export const CHARS_PER_TOKEN = 3;

/** A message that may carry its token count, counted once when it was stored. */
export type CountedMessage = ChatMessage & { readonly tokens?: number | null };

/**
 * Long texts are counted in slices of this many characters. BPE is quadratic
 * in the length of a run without spaces (300 000 'x' took ~2 minutes whole,
 * 3 ms sliced); slicing changes the count of ordinary prose by well under 1 %.
 */
export const ESTIMATE_SLICE_CHARS = 1_000;

/** The tokenizer's count of `text`, sliced; no memo. */
function countSliced(text: string): number {
  // An empty text needs no tokenizer tables; one of a slice or less is counted whole by the loop.
  if (text.length === 0) return 0;
  const count = tokenizer();
  let tokens = 0;
  for (let at = 0; at < text.length; at += ESTIMATE_SLICE_CHARS) {
    tokens += count(text.slice(at, at + ESTIMATE_SLICE_CHARS));
  }
  return tokens;
}

/** Texts shorter than this are counted every time: the lookup would cost about as much. */
export const SHARED_MEMO_MIN_TEXT_CHARS = 32;

/**
 * The same text is counted several times in one turn: the user message when
 * it is stored and again in the prompt the model gets, the reply when the
 * model reports its usage, when it is stored, and in the next prompt. The
 * texts of the last few turns of every conversation are remembered here, so
 * each is tokenized once.
 */
export function estimateTextTokens(text: string): number {
  return text.length < SHARED_MEMO_MIN_TEXT_CHARS ? countSliced(text) : sharedMemo.count(text);
}

/**
 * The message's tokens, framing included: its stored count when it has one
 * (`tokens`, written with the message), else the tokenizer's.
 */
export function estimateMessageTokens(message: CountedMessage): number {
  return messageTokens(message, estimateTextTokens);
}

/** estimateMessageTokens with `countText` in place of estimateTextTokens. */
export function messageTokens(message: CountedMessage, countText: CountTokens): number {
  if (typeof message.tokens === 'number') return message.tokens;
  let tokens = MESSAGE_OVERHEAD_TOKENS + countText(message.content ?? '');
  for (const call of message.tool_calls ?? []) {
    tokens += countText(call.function.name) + countText(call.function.arguments) + 3;
  }
  return tokens;
}

/** `countText` replaces estimateTextTokens (a memo of it: the same counts, counted once). */
export function estimateMessagesTokens(
  messages: readonly CountedMessage[],
  countText: CountTokens = estimateTextTokens,
): number {
  let total = 0;
  for (const message of messages) total += messageTokens(message, countText);
  return total;
}

/** Texts longer than this are counted every time, not remembered. */
export const TOKEN_MEMO_MAX_TEXT_CHARS = 16_384;
/** Characters a TokenMemo holds at most; the oldest texts go first. */
export const TOKEN_MEMO_MAX_CHARS = 1_000_000;

/**
 * estimateTextTokens remembered per text, for a caller that counts the same
 * texts again and again (a model reporting the usage of a whole prompt on
 * every call). Bounded by TOKEN_MEMO_MAX_CHARS; evicts in insertion order.
 */
export class TokenMemo {
  private readonly counts = new Map<string, number>();
  private chars = 0;

  constructor(private readonly maxChars = TOKEN_MEMO_MAX_CHARS) {}

  readonly count = (text: string): number => {
    const known = this.counts.get(text);
    if (known !== undefined) return known;
    const tokens = countSliced(text);
    this.remember(text, tokens);
    return tokens;
  };

  /** Takes `tokens` as the count of `text` (the caller counted it, in parts). */
  remember(text: string, tokens: number): void {
    if (text.length > TOKEN_MEMO_MAX_TEXT_CHARS || this.counts.has(text)) return;
    this.counts.set(text, tokens);
    this.chars += text.length;
    for (const oldest of this.counts.keys()) {
      if (this.chars <= this.maxChars) break;
      this.counts.delete(oldest);
      this.chars -= oldest.length;
    }
  }
}

/** Characters the process-wide memo of estimateTextTokens holds at most (some 8 MB of strings). */
export const SHARED_MEMO_MAX_CHARS = 4_000_000;
const sharedMemo = new TokenMemo(SHARED_MEMO_MAX_CHARS);

/**
 * estimateTextTokens of `parts.join('')`, counting each part on its own: a
 * part that recurs (a canned sentence) is tokenized once, from the memo.
 * Exact only when every join falls between two of the tokenizer's
 * pre-tokens (BPE never merges across those), e.g. before a space-led word
 * that follows punctuation: the caller must know its parts meet there. The
 * whole text's count is remembered, so counting it again costs a lookup.
 */
export function estimateJoinedTextTokens(parts: readonly string[]): number {
  let tokens = 0;
  for (const part of parts) tokens += estimateTextTokens(part);
  const whole = parts.join('');
  if (whole.length >= SHARED_MEMO_MIN_TEXT_CHARS) sharedMemo.remember(whole, tokens);
  return tokens;
}

/** Prompts (cache keys) a PromptTokenCounter remembers; the least recently used goes first. */
export const PROMPT_COUNTER_MAX_KEYS = 256;

interface CountedEntry {
  readonly message: ChatMessage;
  readonly tokens: number;
}

/** The same text and tool calls: what messageTokens counts is the same. */
function sameCountedParts(a: ChatMessage, b: ChatMessage): boolean {
  if (a.content !== b.content) return false;
  const callsA = a.tool_calls ?? [];
  const callsB = b.tool_calls ?? [];
  return (
    callsA.length === callsB.length &&
    callsA.every(
      (call, i) =>
        call.function.name === callsB[i]!.function.name &&
        call.function.arguments === callsB[i]!.function.arguments,
    )
  );
}

/**
 * A whole prompt's tokens, for a model that reports usage by counting (the
 * offline model), without recounting what the previous call of the same
 * conversation already counted: per cache key (the session), the previous
 * prompt's messages and their counts, as a provider's prompt cache sees a
 * repeated prefix. A message equal to the one at the same place in the
 * previous prompt takes its count; others are counted by estimateTextTokens.
 * The counts are exactly estimateMessagesTokens'. Its text memo alone is not
 * enough: many conversations at once cycle through more text than it holds,
 * and then it never hits.
 */
export class PromptTokenCounter {
  private readonly previous = new Map<string, readonly CountedEntry[]>();

  /** `textCounter` replaces estimateTextTokens (a test counts what is counted). */
  constructor(private readonly textCounter: CountTokens = estimateTextTokens) {}

  count(messages: readonly ChatMessage[], key?: string): number {
    const before = key === undefined ? undefined : this.previous.get(key);
    const entries: CountedEntry[] = new Array<CountedEntry>(messages.length);
    let total = 0;
    for (let i = 0; i < messages.length; i++) {
      const message = messages[i]!;
      const known = before?.[i];
      // The same message object (the normaliser passes unchanged ones through) keeps its entry.
      let entry = known;
      if (entry === undefined || entry.message !== message) {
        const tokens =
          known !== undefined && sameCountedParts(known.message, message)
            ? known.tokens
            : messageTokens(message, this.textCounter);
        entry = { message, tokens };
      }
      entries[i] = entry;
      total += entry.tokens;
    }
    if (key !== undefined) this.remember(key, entries);
    return total;
  }

  /** A text of the call (its reply), remembered: the next prompt repeats it. */
  countText(text: string): number {
    return this.textCounter(text);
  }

  private remember(key: string, entries: readonly CountedEntry[]): void {
    // Re-inserted last: the map's order is least recently used first.
    this.previous.delete(key);
    this.previous.set(key, entries);
    for (const oldest of this.previous.keys()) {
      if (this.previous.size <= PROMPT_COUNTER_MAX_KEYS) break;
      this.previous.delete(oldest);
    }
  }
}
