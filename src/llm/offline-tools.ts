/**
 * How the offline model decides to call a tool: only when the newest user
 * message tells it to, in words the guide shows, and only a tool the request
 * offers. Pure and deterministic: the same request gives the same decision.
 *
 * The directives, in the order they appear in the message:
 *
 * - a line `/tool <name>` with optional arguments: a JSON object
 *   (`{"city":"Lyon"}`), `key=value` pairs (`city=Lyon`; a value that reads
 *   as JSON, such as `10` or `"New York"`, is taken as JSON), or plain text,
 *   which fills the tool's one text parameter;
 * - a line `/ask <question>`: the `ask_user` tool with that question;
 * - the words `use the <name> tool`, optionally followed by `: <text>` (to the
 *   end of its sentence), read like the arguments of a `/tool` line;
 * - the words `ask me <question>` (or `ask me: <question>`), up to the end of
 *   the sentence: the `ask_user` tool.
 *
 * Each directive is one step: the model makes one call per reply, the next
 * once the previous call has its result, and answers in text when every step
 * is done (or when a step names a tool the request does not offer).
 */
import { createHash } from 'node:crypto';
import type { ChatMessage, ToolCall, ToolSpec } from './messages.js';

export const ASK_USER = 'ask_user';

/** One thing the message asked for: a call with its arguments, or why none can be made. */
export type OfflineStep =
  | { kind: 'call'; name: string; arguments: Record<string, unknown> }
  | { kind: 'problem'; name: string; text: string };

export type OfflineDecision =
  /** No directive in the newest user message: the canned reply. */
  | { kind: 'none' }
  | { kind: 'call'; call: ToolCall }
  /** Every step done, or stopped at a problem: a text reply with the results. */
  | { kind: 'answer'; results: DoneCall[]; problem?: string };

export interface DoneCall {
  name: string;
  arguments: string;
  result: string;
}

const TOOL_LINE = /^\s*\/tool\s+([A-Za-z0-9_-]+)(?:[ \t]+(.*))?$/;
const ASK_LINE = /^\s*\/ask\s+(.+)$/;
/** "use the book_hotel tool: Lyon." — the text runs to the end of its sentence. */
const USE_WORDS =
  /\buse\s+(?:the\s+)?`?([A-Za-z0-9_-]+)`?\s+tool\b(?:\s*:\s*((?:[^\n.!?;]|[.!?;](?!\s|$))*[.!?;]?))?/gi;
const ASK_WORDS = /\bask\s+me\b\s*:?\s*([^\n.?!]*[?]?)/gi;
const KEY_VALUES = /^(?:\s*[A-Za-z_][\w.-]*=(?:"(?:[^"\\]|\\.)*"|\S+))+\s*$/;
const KEY_VALUE = /([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|\S+)/g;

function offered(tools: readonly ToolSpec[], name: string): ToolSpec | undefined {
  return tools.find((tool) => tool.name === name);
}

function offeredNames(tools: readonly ToolSpec[]): string {
  return tools.length === 0 ? 'none' : tools.map((tool) => tool.name).join(', ');
}

function missing(tools: readonly ToolSpec[], name: string): OfflineStep {
  return {
    kind: 'problem',
    name,
    text: `I would need the tool "${name}", which this request does not offer (tools offered: ${offeredNames(tools)}). Add it to the agent's "tools" in agent.json.`,
  };
}

/** The parameter plain text fills: the one required string, else the one string. */
function textParameter(spec: ToolSpec): string | undefined {
  const properties = (spec.parameters.properties ?? {}) as Record<string, { type?: unknown }>;
  const strings = Object.keys(properties).filter((key) => properties[key]?.type === 'string');
  const required = Array.isArray(spec.parameters.required)
    ? (spec.parameters.required as unknown[]).filter(
        (key): key is string => typeof key === 'string',
      )
    : [];
  const requiredStrings = strings.filter((key) => required.includes(key));
  if (requiredStrings.length === 1) return requiredStrings[0];
  return strings.length === 1 ? strings[0] : undefined;
}

function jsonValue(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

/** The arguments a directive gives `spec`, or what is wrong with them. */
function argumentsFor(
  spec: ToolSpec,
  raw: string,
): { ok: true; value: Record<string, unknown> } | { ok: false; text: string } {
  const text = raw.trim();
  if (text === '') return { ok: true, value: {} };
  if (text.startsWith('{')) {
    const value = jsonValue(text);
    if (typeof value === 'object' && value !== null && !Array.isArray(value))
      return { ok: true, value: value as Record<string, unknown> };
    return {
      ok: false,
      text: `The arguments for "${spec.name}" are not a JSON object: ${text}. Write them as {"key": "value"} or key=value.`,
    };
  }
  if (KEY_VALUES.test(text)) {
    const value: Record<string, unknown> = {};
    for (const [, key, item] of text.matchAll(KEY_VALUE)) value[key!] = jsonValue(item!);
    return { ok: true, value };
  }
  const parameter = textParameter(spec);
  if (parameter === undefined) {
    return {
      ok: false,
      text: `The tool "${spec.name}" has no single text parameter for "${text}"; give its arguments as JSON or key=value (its schema: ${JSON.stringify(spec.parameters)}).`,
    };
  }
  return { ok: true, value: { [parameter]: text } };
}

function step(tools: readonly ToolSpec[], name: string, raw: string): OfflineStep {
  const spec = offered(tools, name);
  if (!spec) return missing(tools, name);
  const args = argumentsFor(spec, raw);
  return args.ok
    ? { kind: 'call', name, arguments: args.value }
    : { kind: 'problem', name, text: args.text };
}

/** "which city to start from" → "Which city to start from?" */
function asQuestion(text: string): string {
  const trimmed = text.trim().replace(/[,;:]+$/, '');
  const sentence = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return sentence.endsWith('?') ? sentence : `${sentence}?`;
}

function askStep(tools: readonly ToolSpec[], question: string): OfflineStep {
  if (!offered(tools, ASK_USER)) return missing(tools, ASK_USER);
  return { kind: 'call', name: ASK_USER, arguments: { question: asQuestion(question) } };
}

/** The steps the message asks for, in the order they appear. */
export function offlineSteps(message: string, tools: readonly ToolSpec[]): OfflineStep[] {
  const found: { at: number; step: OfflineStep }[] = [];
  let offset = 0;
  for (const line of message.split('\n')) {
    const tool = TOOL_LINE.exec(line);
    const ask = ASK_LINE.exec(line);
    if (tool) found.push({ at: offset, step: step(tools, tool[1]!, tool[2] ?? '') });
    else if (ask) found.push({ at: offset, step: askStep(tools, ask[1]!) });
    else {
      for (const use of line.matchAll(USE_WORDS)) {
        const text = (use[2] ?? '').replace(/[.;]$/, '');
        found.push({ at: offset + use.index, step: step(tools, use[1]!, text) });
      }
      for (const words of line.matchAll(ASK_WORDS)) {
        if (words[1]!.trim() === '') continue;
        found.push({ at: offset + words.index, step: askStep(tools, words[1]!) });
      }
    }
    offset += line.length + 1;
  }
  return found.sort((a, b) => a.at - b.at).map((f) => f.step);
}

/** A stable id for the call: a hash of the request and the step, within providers' limits. */
function callId(messages: readonly ChatMessage[], index: number): string {
  const hash = createHash('sha256').update(JSON.stringify(messages)).update(`#${index}`);
  return `call_${hash.digest('hex').slice(0, 24)}`;
}

/** What the offline model does next for `messages` and the `tools` the request offers. */
export function decideOffline(
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[],
): OfflineDecision {
  const userAt = messages.findLastIndex((m) => m.role === 'user');
  if (userAt < 0) return { kind: 'none' };
  const steps = offlineSteps(messages[userAt]!.content ?? '', tools);
  if (steps.length === 0) return { kind: 'none' };
  const after = messages.slice(userAt + 1);
  const results: DoneCall[] = [];
  for (const message of after) {
    for (const call of message.tool_calls ?? []) {
      const result = after.find((m) => m.role === 'tool' && m.tool_call_id === call.id);
      results.push({
        name: call.function.name,
        arguments: call.function.arguments,
        result: result?.content ?? '',
      });
    }
  }
  const done = after.filter((m) => (m.tool_calls ?? []).length > 0).length;
  const next = steps[done];
  if (next === undefined) return { kind: 'answer', results };
  if (next.kind === 'problem') return { kind: 'answer', results, problem: next.text };
  return {
    kind: 'call',
    call: {
      id: callId(messages, done),
      type: 'function',
      function: { name: next.name, arguments: JSON.stringify(next.arguments) },
    },
  };
}
