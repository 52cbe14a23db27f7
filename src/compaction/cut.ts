/**
 * Where defaultCompaction cuts. Pure policy over an array of message metadata:
 * no I/O, no clock, property-tested.
 *
 * The greedy rule is by length, not count (a few giant tool outputs weigh more
 * than many short replies): take whole messages from the oldest until the batch
 * reaches `floor(totalLength × compactCount / 100)` (the session's
 * `compact_count`), rounding up. One more rule: the cut may only fall where no
 * tool call is open — every call in the batch has its result in the batch and
 * the first message after the cut is not a `tool` message — so the request
 * built from the summary and the remaining tail is always one a provider
 * accepts.
 */

/** The fields of a message the planner reads. */
export interface CutCandidate {
  role: 'system' | 'user' | 'assistant' | 'tool';
  chars: number;
  callIds?: readonly string[];
  toolCallId?: string;
}

export interface CutPlan {
  /** How many messages from the start of `messages` the summary will cover (0 = nothing). */
  cutoff: number;
  /** summaryLength + Σ chars of the uncompacted messages. */
  totalChars: number;
  /** floor(totalChars × compactCount / 100). */
  targetChars: number;
  /** Σ chars of the messages in the batch. */
  batchChars: number;
}

export interface CutOptions {
  /** Never cut past this many messages (automatic compaction keeps the running turn raw). */
  maxCutoff?: number;
  /**
   * A call that waits for a person (approval, or an `ask_user` answer): the
   * message that makes it, and everything after, stay raw until the wait ends.
   */
  pendingCallId?: string;
}

/** How many messages may be cut at most: before the running turn and before a pending call. */
export function cutLimit(messages: readonly CutCandidate[], options: CutOptions): number {
  let limit = Math.min(options.maxCutoff ?? messages.length, messages.length);
  if (options.pendingCallId !== undefined) {
    const at = messages.findIndex((m) => m.callIds?.includes(options.pendingCallId!) === true);
    if (at >= 0) limit = Math.min(limit, at);
  }
  return limit;
}

/**
 * `safe[c]` is true when a cut after the first `c` messages leaves no tool
 * call open: all calls in `messages[0, c)` are answered there and
 * `messages[c]` is not a tool result.
 */
export function safeBoundaries(messages: readonly CutCandidate[]): boolean[] {
  const safe = [messages[0]?.role !== 'tool'];
  const open = new Set<string>();
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!;
    if (message.role === 'tool' && message.toolCallId !== undefined)
      open.delete(message.toolCallId);
    for (const id of message.callIds ?? []) open.add(id);
    safe.push(open.size === 0 && messages[i + 1]?.role !== 'tool');
  }
  return safe;
}

/**
 * Plans one compaction over the uncompacted `messages` (non-system, oldest
 * first). Returns `cutoff: 0` when nothing can or should be compacted.
 */
export function planCut(
  messages: readonly CutCandidate[],
  summaryLength: number,
  compactCount: number,
  options: CutOptions = {},
): CutPlan {
  let totalChars = summaryLength;
  for (const message of messages) totalChars += message.chars;
  const targetChars = Math.floor((totalChars * compactCount) / 100);
  // An empty history needs no check of its own: it has no boundary past 0,
  // so the search below cuts nothing.
  if (targetChars === 0) return { cutoff: 0, totalChars, targetChars, batchChars: 0 };

  // Greedy, rounding up: a message is never split.
  let greedy = 0;
  let batchChars = 0;
  while (greedy < messages.length && batchChars < targetChars) {
    batchChars += messages[greedy]!.chars;
    greedy += 1;
  }

  const limit = cutLimit(messages, options);
  const safe = safeBoundaries(messages);
  let cutoff = 0;
  // Forward to the next safe boundary; if there is none, back to the last one before.
  // Never past the limit, whichever way.
  for (let c = Math.min(greedy, limit); c <= limit; c++) {
    if (safe[c] && c > 0) {
      cutoff = c;
      break;
    }
  }
  if (cutoff === 0) {
    for (let c = Math.min(greedy, limit) - 1; c > 0; c--) {
      if (safe[c]) {
        cutoff = c;
        break;
      }
    }
  }
  // Still 0 when no boundary within the limit is safe: nothing is cut.
  let chars = 0;
  for (let i = 0; i < cutoff; i++) chars += messages[i]!.chars;
  return { cutoff, totalChars, targetChars, batchChars: chars };
}
