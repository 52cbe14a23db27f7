/**
 * The summariser's prompt: a rolling, structured summary that is updated
 * (not rewritten) with each batch, keeps every fact a later turn may need,
 * and stays under a hard size cap. Tool outputs are clipped in its input.
 */
import type { ChatMessage } from '../llm/messages.js';
import { CHARS_PER_TOKEN } from '../llm/tokens.js';
import { capSections, EMPTY_SECTIONS_DOCUMENT, SUMMARY_SECTIONS } from './summary-sections.js';

/** A tool result longer than this is clipped (head and tail kept) in the summariser's input. */
export const TOOL_OUTPUT_CLIP_CHARS = 2_000;
/** Any other message longer than this is clipped the same way. */
export const MESSAGE_CLIP_CHARS = 8_000;

export function clipMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const keep = Math.floor((max - 40) / 2);
  return `${text.slice(0, keep)}\n[… ${text.length - 2 * keep} characters omitted …]\n${text.slice(-keep)}`;
}

/** One transcript line block per message, as the summariser reads it. */
export function transcriptEntry(message: ChatMessage & { seq?: number }): string {
  const label = message.seq !== undefined ? `#${message.seq} ${message.role}` : message.role;
  const parts: string[] = [];
  if (message.content) {
    parts.push(
      clipMiddle(
        message.content,
        message.role === 'tool' ? TOOL_OUTPUT_CLIP_CHARS : MESSAGE_CLIP_CHARS,
      ),
    );
  }
  for (const call of message.tool_calls ?? []) {
    parts.push(
      `called ${call.function.name}(${clipMiddle(call.function.arguments, TOOL_OUTPUT_CLIP_CHARS)})`,
    );
  }
  const who = message.role === 'tool' && message.name ? ` (${message.name})` : '';
  return `[${label}${who}] ${parts.join('\n')}`;
}

/** The sections prompt says this; the offline model answers such prompts in sections. */
export const SECTIONS_PROMPT_MARKER = 'Keep exactly these Markdown sections';
/** Where the summariser's input turns from the summary to the new messages. */
export const NEW_MESSAGES = '\n\nNew messages to fold into the summary:\n';
export const ADDITIONAL_INSTRUCTIONS = '\n\nAdditional instructions for this summary:';

/** How the summary is written: fixed sections edited in place, or free prose. */
export type SummaryFormat = 'sections' | 'prose';

export function summarySystemPrompt(
  maxSummaryChars: number,
  format: SummaryFormat = 'sections',
): string {
  const shape =
    format === 'sections'
      ? [
          'The existing summary is the document you edit: return it with the new messages applied, changing it in place (add new items, correct items that changed, remove items that no longer hold) rather than rewriting it from scratch.',
          `${SECTIONS_PROMPT_MARKER}, in this order, each a "## " heading followed by "- " items ("- none" when empty): ${SUMMARY_SECTIONS.join('; ')}.`,
          'Goal: what the user is trying to achieve. Instructions and preferences: every standing instruction and preference the user gave, to keep following. Decisions: what was decided, and why. Facts and figures: names, numbers, ids, file paths, URLs, amounts and dates, written verbatim. Open items: tasks and questions still open. Tool results relied on: results later turns depend on, in short.',
          'When a fact changes, replace the old value with the new one; the newest statement wins.',
        ]
      : [
          'Update the existing summary with the new messages: keep what is still true, add what is new, and correct what changed.',
          'Write plain prose paragraphs.',
        ];
  return [
    'You maintain the rolling summary of a long conversation between a user and an AI agent.',
    "The summary replaces the older messages in the agent's context, so anything you leave out is lost to the agent.",
    ...shape,
    "Keep every name, number, identifier (ids, file paths, URLs, amounts, dates), decision and its reason, open task or question, and the user's goals and preferences, verbatim.",
    `Stay under ${maxSummaryChars} characters: when space is short, drop stale or superseded items first, never current identifiers, instructions or open tasks.`,
    'Output only the updated summary, with no preamble.',
  ].join('\n');
}

export function summaryUserPrompt(input: {
  previousSummary: string | null;
  transcript: readonly string[];
  instructions?: string;
  format?: SummaryFormat;
}): string {
  const empty =
    (input.format ?? 'sections') === 'sections' ? EMPTY_SECTIONS_DOCUMENT : '(none yet)';
  const previous = input.previousSummary?.trim() ? input.previousSummary : empty;
  const extra = input.instructions?.trim()
    ? `${ADDITIONAL_INSTRUCTIONS} ${input.instructions.trim()}`
    : '';
  return `Existing summary:\n${previous}${NEW_MESSAGES}${input.transcript.join('\n')}${extra}`;
}

/** The request messages for one summary call. */
export function summaryRequest(input: {
  previousSummary: string | null;
  transcript: readonly string[];
  instructions?: string;
  maxSummaryChars: number;
  format?: SummaryFormat;
}): { messages: ChatMessage[]; maxTokens: number } {
  return {
    messages: [
      { role: 'system', content: summarySystemPrompt(input.maxSummaryChars, input.format) },
      { role: 'user', content: summaryUserPrompt(input) },
    ],
    maxTokens: Math.ceil(input.maxSummaryChars / CHARS_PER_TOKEN),
  };
}

/**
 * Enforces the hard cap on a summary the model made too long: a sectioned
 * one loses whole items (the oldest, least precious first); anything else is
 * cut at a line end.
 */
export function capSummary(summary: string, maxChars: number): string {
  const trimmed = summary.trim();
  if (trimmed.length <= maxChars) return trimmed;
  const sectioned = capSections(trimmed, maxChars);
  if (sectioned !== undefined) return sectioned;
  const cut = trimmed.slice(0, maxChars - 1);
  const lineEnd = cut.lastIndexOf('\n');
  return `${lineEnd > maxChars / 2 ? cut.slice(0, lineEnd) : cut}…`;
}
