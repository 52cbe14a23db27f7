/**
 * The last check before a request leaves: its prompt estimate (Cairn's
 * tokenizer) plus the output tokens it asks for must fit the role's context
 * window, or it is refused with CONTEXT_OVERFLOW instead of being sent. Every
 * role's client is wrapped (chat, tool loop, summary, title); for the main
 * role the context guard's overflow recovery sits outside this check, so a
 * refusal there compacts and retries before it reaches the caller.
 *
 * The check never costs more than the window: texts are first bounded by
 * their UTF-8 size (a token is at least one byte), and only when that bound
 * is over the limit are they tokenized, slice by slice, stopping as soon as
 * the count passes it. An 8 MB message costs one `Buffer.byteLength` and a
 * window's worth of tokenizing, not a tokenization of 8 MB on every call.
 */
import { CairnError } from '../errors.js';
import type { ChatMessage, ToolSpec } from './messages.js';
import { decorateModel, type ModelClient, type ModelRequest } from './model-client.js';
import { estimateTextTokens, ESTIMATE_SLICE_CHARS, MESSAGE_OVERHEAD_TOKENS } from './tokens.js';

/** Framing tokens counted per tool call and per tool definition (as estimateMessageTokens does for calls). */
const TOOL_OVERHEAD_TOKENS = 3;

export interface WindowCheckOptions {
  /** The role, for the error message (`main`, `compact`, `title`). */
  role: string;
  /** Output tokens a request asks for when it sets no `maxTokens` (Anthropic's default, or none). */
  defaultOutputTokens: number;
}

/** The texts a request's prompt is made of, and the framing tokens around them. */
function promptParts(
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[] | undefined,
): { texts: string[]; framing: number } {
  const texts: string[] = [];
  let framing = 0;
  for (const message of messages) {
    framing += MESSAGE_OVERHEAD_TOKENS;
    if (message.content) texts.push(message.content);
    for (const call of message.tool_calls ?? []) {
      framing += TOOL_OVERHEAD_TOKENS;
      texts.push(call.function.name, call.function.arguments);
    }
  }
  for (const tool of tools ?? []) {
    framing += TOOL_OVERHEAD_TOKENS;
    texts.push(JSON.stringify(tool));
  }
  return { texts, framing };
}

/**
 * Whether the prompt of `messages` and `tools` fits `limit` tokens, as a
 * number: at most `limit` when it fits (the tokenizer's count, or the UTF-8
 * bound when that alone shows it fits), else a count past `limit` at which
 * counting stopped. Texts up to the memo's size come from the shared memo.
 */
export function promptTokensUpTo(
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[] | undefined,
  limit: number,
): number {
  const { texts, framing } = promptParts(messages, tools);
  let bytes = framing;
  for (const text of texts) bytes += Buffer.byteLength(text, 'utf8');
  // Every token is at least one byte: a prompt this small fits, uncounted.
  if (bytes <= limit) return bytes;
  let tokens = framing;
  for (const text of texts) {
    if (text.length <= ESTIMATE_SLICE_CHARS * 16) {
      tokens += estimateTextTokens(text);
    } else {
      for (let at = 0; at < text.length && tokens <= limit; at += ESTIMATE_SLICE_CHARS) {
        tokens += estimateTextTokens(text.slice(at, at + ESTIMATE_SLICE_CHARS));
      }
    }
    if (tokens > limit) return tokens;
  }
  return tokens;
}

/** `model` with every request checked against its context window before it is sent. */
export function checkWindow(model: ModelClient, options: WindowCheckOptions): ModelClient {
  return decorateModel(model, async (request: ModelRequest, callOptions) => {
    const window = model.contextWindow;
    const output = request.maxTokens ?? options.defaultOutputTokens;
    const room = window - output;
    const prompt = room > 0 ? promptTokensUpTo(request.messages, request.tools, room) : Infinity;
    if (prompt > room) {
      const counted = Number.isFinite(prompt) ? `at least ${prompt}` : 'any';
      throw new CairnError(
        'CONTEXT_OVERFLOW',
        `The ${request.purpose} request was not sent: its prompt (${counted} tokens by Cairn's estimate) ` +
          `plus ${output} output tokens does not fit the ${options.role} model's context window of ${window} tokens ` +
          `(models.${options.role}.contextWindow).`,
      );
    }
    return model.complete(request, callOptions);
  });
}
