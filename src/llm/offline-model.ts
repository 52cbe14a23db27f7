/**
 * The built-in `offline` model: deterministic, no network, so `npm start`
 * works with no API key. Chat replies are canned and say what they are; it
 * calls a tool only when the newest user message tells it to (the directives
 * of `offline-tools.ts`), and then replies with the results; summaries are
 * extractive (the first words of each line of the input); a session title is
 * the first words the user wrote.
 */
import { CHARS_PER_TOKEN, estimateJoinedTextTokens, PromptTokenCounter } from './tokens.js';
import type { ModelCallOptions, ModelClient, ModelRequest, ModelResponse } from './model-client.js';
import { DEFAULT_CONTEXT_WINDOW_TOKENS, OFFLINE_MODEL_NAME } from '../config/settings.js';
import { extractSections } from './offline-sections.js';
import { decideOffline, type DoneCall } from './offline-tools.js';
import type { ChatMessage } from './messages.js';
import {
  ADDITIONAL_INSTRUCTIONS,
  NEW_MESSAGES,
  SECTIONS_PROMPT_MARKER,
} from '../compaction/prompt.js';

export const OFFLINE_LABEL = '[offline model]';
/** How much of the user's message a canned reply quotes. */
const QUOTE_CHARS = 200;
/** How much of each line of the conversation its summary keeps. */
const LINE_CHARS = 160;
/** How much of a tool's result the reply after it repeats. */
const RESULT_CHARS = 500;
/** The most words of a made-up title. */
const TITLE_WORDS = 6;
/** How to make it call a tool, in every canned reply. */
export const OFFLINE_DIRECTIVES_HINT =
  'It calls a tool only when told to: a line "/tool <name> {json args}" or "/ask <question>", or the words "use the <name> tool" or "ask me …".';
/**
 * The canned reply after the quote. It starts with a space and a word and
 * what comes before it ends with `".`, so the tokenizer never joins the two
 * (see estimateJoinedTextTokens): the reply's count is the quote's plus this
 * constant's, tokenized once.
 */
const CANNED_TAIL = ` This is a canned reply from Cairn's built-in offline model; set OPENAI_BASE_URL (and OPENAI_API_KEY, CAIRN_MODEL) to talk to a real model. ${OFFLINE_DIRECTIVES_HINT}`;
/** How every canned reply ends: the quote's closing, then the tail. */
const CANNED_END = `".${CANNED_TAIL}`;
/** Ends every reply that reports tool results. */
export const OFFLINE_TOOL_NOTE =
  "(Cairn's built-in offline model calls tools only when a message tells it to; a real model decides by itself.)";
/** Words a title should not end on ("Help me plan a trip to" reads cut off). */
const DANGLING_WORDS = new Set(
  'a an and are at but by for from i in is my of on or the to with'.split(' '),
);

function clip(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

function text(content: string): ChatMessage {
  return { role: 'assistant', content };
}

/** `I called current_time {}; it returned: {…}.` */
function describeResult(call: DoneCall): string {
  const result = clip(call.result, RESULT_CHARS);
  return `I called ${call.name} ${call.arguments}; it returned: ${result}${/[.!?]$/.test(result) ? '' : '.'}`;
}

export class OfflineModel implements ModelClient {
  readonly model = OFFLINE_MODEL_NAME;
  /** A session's prompt repeats the previous call's messages: each is counted once. */
  private readonly tokens = new PromptTokenCounter();

  constructor(readonly contextWindow: number = DEFAULT_CONTEXT_WINDOW_TOKENS) {}

  async complete(request: ModelRequest, options: ModelCallOptions = {}): Promise<ModelResponse> {
    const message =
      request.purpose === 'summary'
        ? text(this.summarize(request))
        : request.purpose === 'title'
          ? text(this.title(request))
          : this.chat(request);
    const content = message.content ?? '';
    if (options.onDelta && content !== '') {
      // Stream in word-sized pieces so SSE clients see real deltas.
      for (const piece of content.match(/\S+\s*/g) ?? [content]) options.onDelta(piece);
    }
    const calls = message.tool_calls ?? [];
    return {
      message,
      finishReason: calls.length > 0 ? 'tool_calls' : 'stop',
      usage: {
        prompt_tokens: this.tokens.count(request.messages, request.promptCacheKey),
        // Through the memo: the next call's prompt repeats this reply.
        completion_tokens:
          calls.length === 0 && content.endsWith(CANNED_END)
            ? estimateJoinedTextTokens([content.slice(0, -CANNED_TAIL.length), CANNED_TAIL])
            : this.tokens.countText(
                content + calls.map((c) => c.function.name + c.function.arguments).join(''),
              ),
      },
      model: OFFLINE_MODEL_NAME,
    };
  }

  /** A tool call when the newest user message asks for one, else a text reply. */
  private chat(request: ModelRequest): ChatMessage {
    const decision = decideOffline(request.messages, request.tools ?? []);
    if (decision.kind === 'none') return text(this.reply(request));
    if (decision.kind === 'call') {
      const { name } = decision.call.function;
      return {
        role: 'assistant',
        content: `${OFFLINE_LABEL} Calling the tool ${name}, as your message asked.`,
        tool_calls: [decision.call],
      };
    }
    const parts = decision.results.map(describeResult);
    if (decision.problem !== undefined) parts.push(decision.problem);
    return text(`${OFFLINE_LABEL} ${parts.join(' ')} ${OFFLINE_TOOL_NOTE}`);
  }

  private reply(request: ModelRequest): string {
    const lastUser = request.messages.findLast((m) => m.role === 'user');
    const said = clip(lastUser?.content ?? '', QUOTE_CHARS);
    return `${OFFLINE_LABEL} You said: "${said}${CANNED_END}`;
  }

  /**
   * The user's first words: up to six, ending at a sentence end once there
   * are three, never on a dangling "to" or "the". The canned label stays out:
   * a list of sessions named "[offline model] …" would tell the user nothing.
   */
  private title(request: ModelRequest): string {
    const excerpt = request.messages.find((m) => m.role === 'user')?.content ?? '';
    // The titler sends "User: …\n\nAssistant: …": the user's part names the session.
    const userPart = (excerpt.split(/\n\s*Assistant:/)[0] ?? '').replace(/^\s*User:/, '');
    const words: string[] = [];
    for (const word of userPart.split(/\s+/).filter((w) => w !== '')) {
      words.push(word);
      if (words.length === TITLE_WORDS || (words.length >= 3 && /[.!?]$/.test(word))) break;
    }
    const bare = (word: string): string => word.replace(/[^\p{L}\p{N}]+$/u, '');
    while (words.length > 1 && DANGLING_WORDS.has(bare(words.at(-1)!).toLowerCase())) words.pop();
    const title = words.join(' ').replace(/[^\p{L}\p{N})\]]+$/u, '');
    return title === '' ? 'New conversation' : title.charAt(0).toUpperCase() + title.slice(1);
  }

  /**
   * Extractive: in sections when the prompt asks for them (the previous
   * summary edited in place), else the start of every non-empty input line,
   * within the max_tokens budget.
   */
  private summarize(request: ModelRequest): string {
    const input = request.messages
      .filter((m) => m.role === 'user')
      .map((m) => m.content ?? '')
      .join('\n');
    const maxChars = (request.maxTokens ?? 3000) * CHARS_PER_TOKEN;
    const system = request.messages.find((m) => m.role === 'system')?.content ?? '';
    if (system.includes(SECTIONS_PROMPT_MARKER)) return this.summarizeSections(input, maxChars);
    // Keep content lines; drop the prompt's own headings ("Existing summary:")
    // and list markers, so repeated summaries do not nest "- - ".
    const lines = input
      .split('\n')
      .map((line) => clip(line.replace(/^[-*]\s+/, ''), LINE_CHARS))
      .filter(
        (line) =>
          line !== '' &&
          !line.endsWith(':') &&
          line !== '(none yet)' &&
          !line.startsWith(OFFLINE_LABEL),
      );
    let summary = `${OFFLINE_LABEL} Extractive summary:`;
    for (const line of lines) {
      if (summary.length + line.length + 3 > maxChars) break;
      summary += `\n- ${line}`;
    }
    return summary;
  }

  /** The prompt's "Existing summary:" part edited with its "New messages" part. */
  private summarizeSections(input: string, maxChars: number): string {
    const body = input.split(ADDITIONAL_INSTRUCTIONS)[0] ?? '';
    const [head = '', transcript = ''] = body.split(NEW_MESSAGES);
    const previous = head.replace(/^[\s\S]*?Existing summary:\n/, '');
    return extractSections({
      previous: previous === '(none yet)' ? '' : previous,
      transcript,
      maxChars,
      skip: (line) => line.startsWith(OFFLINE_LABEL),
    });
  }
}
