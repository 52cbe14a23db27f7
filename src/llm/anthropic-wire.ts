/**
 * Cairn's messages (the OpenAI chat vocabulary) → an Anthropic Messages API
 * request body, and the prompt-cache breakpoints on it. Pure.
 *
 * What the Messages API requires and this guarantees for any history:
 * the system prompt is top-level, never a message; the first message is a
 * user message and roles alternate; every `tool_use` is answered by a
 * `tool_result` in the very next (user) message, results before any text
 * there; no text block is empty; tool inputs are JSON objects; at most four
 * blocks carry `cache_control`.
 */
import type {
  ContentBlockParam,
  MessageParam,
  TextBlockParam,
  Tool,
} from '@anthropic-ai/sdk/resources/messages';
import type { ChatMessage, ToolSpec } from './messages.js';
import { LEADING_TOOL_CALL_BRIDGE, normalizeOutgoing } from './normalize-request.js';

/** The Messages API refuses a request with more blocks than this carrying `cache_control`. */
export const MAX_CACHE_BREAKPOINTS = 4;

/** Sent after a history that ends with an assistant message (a prefill some models refuse). */
export const CONTINUE_AFTER_ASSISTANT = '(Continue.)';

/** Which messages of a built context mark where its stable prefixes end. */
export interface CacheHints {
  /** Recognises the user message carrying the rolling summary. */
  isSummary?: (message: ChatMessage) => boolean;
  /**
   * Recognises a message made for this call only (automatic recall's block,
   * placed before the newest user message): the history before it is the
   * prefix the next call repeats.
   */
  isPerCall?: (message: ChatMessage) => boolean;
}

export interface AnthropicWireRequest {
  system: TextBlockParam[];
  messages: MessageParam[];
  tools?: Tool[];
}

type Block = ContentBlockParam;

/** Tool input on the wire: the arguments object (the normaliser made them a JSON object text). */
function toolInput(args: string): Record<string, unknown> {
  const value: unknown = JSON.parse(args);
  return value as Record<string, unknown>;
}

/**
 * The API refuses a request in which two `tool_use` blocks share an id;
 * histories have them (local servers number calls `call_0` every turn).
 * Each repeat gets a fresh wire id, and the results that follow its call
 * are paired with it in order.
 */
class ToolUseIds {
  private readonly used = new Set<string>();
  /** Wire ids of the open exchange's calls, by stored id, in call order. */
  private open = new Map<string, string[]>();

  forCalls(ids: readonly string[]): string[] {
    this.open = new Map();
    return ids.map((id) => {
      let wire = id;
      for (let n = 2; this.used.has(wire); n++) wire = `${id.slice(0, 56)}_${n}`;
      this.used.add(wire);
      this.open.set(id, [...(this.open.get(id) ?? []), wire]);
      return wire;
    });
  }

  forResult(id: string): string {
    return this.open.get(id)?.shift() ?? id;
  }
}

function blocksOf(message: ChatMessage, ids: ToolUseIds): Block[] {
  const text = message.content ?? '';
  switch (message.role) {
    case 'user':
      return [{ type: 'text', text }];
    case 'tool':
      return [
        {
          type: 'tool_result',
          tool_use_id: ids.forResult(message.tool_call_id ?? ''),
          content: text,
        },
      ];
    case 'assistant': {
      const blocks: Block[] = text.trim() === '' ? [] : [{ type: 'text', text }];
      const calls = message.tool_calls ?? [];
      const wireIds = ids.forCalls(calls.map((c) => c.id));
      calls.forEach((call, i) =>
        blocks.push({
          type: 'tool_use',
          id: wireIds[i]!,
          name: call.function.name,
          input: toolInput(call.function.arguments),
        }),
      );
      return blocks;
    }
    case 'system':
      return [];
  }
}

/**
 * Converts a history into the Messages API's shape. The history goes through
 * the shared normaliser first (orphans dropped, missing results filled, ids
 * shortened, blank texts removed), so any input yields a valid request.
 */
export function toAnthropicRequest(
  history: readonly ChatMessage[],
  tools: readonly ToolSpec[] = [],
  hints: CacheHints = {},
): AnthropicWireRequest {
  const normalized = normalizeOutgoing(history);
  const system: TextBlockParam[] = normalized
    .filter((m) => m.role === 'system')
    .map((m) => ({ type: 'text', text: m.content ?? '' }));
  const messages: MessageParam[] = [];
  /** The block that closes the summary pair (the acknowledgement, or the lone summary). */
  let summaryEnd: Block | undefined;
  /** The last block before the first per-call message: the end of the history the next call repeats. */
  let historyEnd: Block | undefined;
  let summaryOpen = false;
  const ids = new ToolUseIds();

  for (const message of normalized) {
    if (message.role === 'system') continue;
    const role = message.role === 'assistant' ? 'assistant' : 'user';
    const blocks = blocksOf(message, ids);
    if (blocks.length === 0) continue;
    const last = messages.at(-1);
    if (historyEnd === undefined && hints.isPerCall?.(message) === true)
      historyEnd = (last?.content as Block[] | undefined)?.at(-1);
    if (last && last.role === role) {
      // Roles must alternate: consecutive user-side messages (tool results,
      // a user message after them) or assistant messages become one message.
      (last.content as Block[]).push(...blocks);
    } else {
      messages.push({ role, content: blocks });
    }
    if (summaryOpen && role === 'assistant') summaryEnd = blocks.at(-1);
    summaryOpen = false;
    if (hints.isSummary?.(message)) {
      summaryEnd = blocks.at(-1);
      summaryOpen = true; // the acknowledgement, when it follows, closes the pair
    }
  }
  if (messages[0]?.role !== 'user')
    messages.unshift({ role: 'user', content: [{ type: 'text', text: LEADING_TOOL_CALL_BRIDGE }] });
  if (messages.at(-1)?.role === 'assistant')
    messages.push({ role: 'user', content: [{ type: 'text', text: CONTINUE_AFTER_ASSISTANT }] });

  const newest = (messages.at(-1)?.content as Block[] | undefined)?.at(-1);
  placeBreakpoints([system[0], summaryEnd, historyEnd, newest]);
  return {
    system,
    messages,
    ...(tools.length > 0
      ? {
          tools: tools.map((t) => ({
            name: t.name,
            description: t.description,
            input_schema: { ...t.parameters, type: 'object' },
          })),
        }
      : {}),
  };
}

/**
 * Marks the ends of the stable prefixes for the prompt cache: the system
 * prompt (the same for the whole session), the summary pair (the same
 * between two compactions), the history before a per-call message (the next
 * call has the same history but not that message: without this mark a
 * recall block made every call's newest mark one the next call never
 * repeats, and only the summary prefix was ever read) and the newest
 * message (the next call of the turn or of the session starts with
 * everything up to it). The API caches the prefix ending at each marked
 * block and refuses more than four marks.
 */
function placeBreakpoints(candidates: readonly (Block | TextBlockParam | undefined)[]): void {
  const marked = new Set<Block | TextBlockParam>();
  for (const block of candidates) {
    if (block === undefined || marked.size >= MAX_CACHE_BREAKPOINTS) continue;
    marked.add(block);
  }
  for (const block of marked)
    (block as { cache_control?: unknown }).cache_control = { type: 'ephemeral' };
}
