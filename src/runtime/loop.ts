/**
 * The tool-calling loop: call the model, run the tools it asks for, persist
 * every message the moment it exists, repeat until the model answers in text,
 * a tool asks the user, a call needs a person's approval, or `maxIterations`
 * is reached. It gets a plain array
 * of messages and knows nothing of sessions, summaries or compaction; the
 * turn's `prepare` hook runs before every model call.
 */
import { CairnError, describeError } from '../errors.js';
import type { ChatMessage, TokenUsage, ToolCall } from '../llm/messages.js';
import type {
  ModelCallScope,
  ModelClient,
  ModelRequest,
  ModelResponse,
} from '../llm/model-client.js';
import type { ToolContext } from '../tools/tool.js';
import { isOutsideAnswer, isWaitForUser, TOOL_TIMEOUT_MS } from '../tools/tool.js';
import type { ToolSet } from '../tools/tool-set.js';
import { EMPTY_TOOL_RESULT, normalizeOutgoing } from '../llm/normalize-request.js';
import type { TurnBudget } from './turn-budget.js';
import { settleOverrun, type Reservation } from './budget.js';

export const EMPTY_REPLY_NUDGE =
  'Your previous reply was empty. Answer the last message, or call a tool if you need one.';
export const TRUNCATED_TOOL_CALL_NOTE =
  'Your previous reply was cut off at the token limit while writing tool-call arguments, so no tool ran. Call the tool again with shorter arguments, or answer in text.';
/** Rounds in a row the model may be told its tool calls were malformed; then the turn fails. */
export const MAX_CORRECTION_ROUNDS = 2;
export const CANCELLED_TOOL_RESULT = 'Error: the tool call was cancelled before it finished.';
/** The result of calls of a turn that were not run because an earlier call stopped the loop. */
export const NOT_RUN_TOOL_RESULT =
  'Not run: another tool call of the same reply is waiting for a person. Call this tool again if you still need it.';
/** The result of calls past the turn's tool-call budget. */
export const OVER_BUDGET_TOOL_RESULT =
  "Not run: this turn reached the agent's tool-call limit (limits.maxToolCalls).";

export type LoopEvent =
  | { type: 'delta'; text: string }
  | { type: 'tool_call'; call: ToolCall }
  | { type: 'tool_result'; callId: string; name: string; content: string; isError: boolean }
  /** Automatic recall put these compacted messages into the next model call. */
  | { type: 'recall'; seqs: number[]; tokens: number };

/** What the loop sees of the turn it runs (`Turn`, made by the turn engine). */
export interface LoopTurn {
  /** Called before every model call; may return a rebuilt context (auto-compaction). */
  prepare(messages: ChatMessage[]): Promise<ChatMessage[]>;
  /** Persists messages as they are produced; resolves once committed. */
  persist(messages: ChatMessage[], usage?: TokenUsage, promptTokens?: number): Promise<void>;
  /** Seqs of the compacted messages recalled into the messages `prepare` last returned. */
  recalledSeqs?(): readonly number[] | undefined;
  /**
   * The messages as the request sends them (old tool results cleared). The
   * loop keeps the whole messages and asks again at every call.
   */
  forRequest?(messages: ChatMessage[]): ChatMessage[];
}

export interface LoopOptions {
  model: ModelClient;
  /** Overrides the model name (the agent's `model`). */
  modelName?: string;
  temperature?: number;
  /** The context to start from (system, summary, tail, the new input). */
  messages: ChatMessage[];
  tools: ToolSet;
  maxIterations: number;
  turn: LoopTurn;
  toolContext: Omit<ToolContext, 'callId' | 'signal'>;
  signal?: AbortSignal;
  stream?: boolean;
  onEvent?: (event: LoopEvent) => void;
  /** Whose calls these are, for the call records and traces. */
  scope?: ModelCallScope;
  /** The agent's budgets: asked before each model call and each tool call. */
  budget?: Pick<TurnBudget, 'beforeModelCall' | 'takeToolCall' | 'toolCallsExceeded'>;
  /**
   * Reserves the tokens of each model call on the session owner's budget
   * before it starts (throws BUDGET_EXCEEDED when they cannot be covered);
   * the loop ends each reservation once the call's usage is stored, or the
   * call failed. Absent: nothing limits the session's owner.
   */
  reserve?: (request: ModelRequest) => Promise<Reservation | undefined>;
}

export type LoopResult =
  | { kind: 'answer'; reply: string; usage: TokenUsage }
  | { kind: 'waiting'; question: string; callId: string; usage: TokenUsage }
  /** Calls whose results come from outside (an API client); the turn's other calls ran. */
  | { kind: 'outside'; reply: string; calls: ToolCall[]; usage: TokenUsage }
  /**
   * Stopped on a call that needs an answer from outside the loop before it
   * may run (`approval`: a tool marked `approval: "required"`). The call is
   * stored without a result; whoever continues supplies one.
   */
  | {
      kind: 'pending';
      reason: 'approval';
      call: ToolCall;
      usage: TokenUsage;
      /** The tool's approvalTimeout ("30m"), when it has one. */
      approvalTimeout?: string;
    };

/** Calls run in this order: plain tools, then those needing approval, then ask_user. */
function callRank(call: ToolCall, tools: ToolSet): number {
  if (call.function.name === 'ask_user') return 2;
  return tools.find(call.function.name)?.approval === 'required' ? 1 : 0;
}

/** A call to a tool marked `approval: "required"` with valid arguments (invalid ones just fail). */
function needsApproval(call: ToolCall, tools: ToolSet): boolean {
  const tool = tools.find(call.function.name);
  return tool?.approval === 'required' && tools.parseArguments(tool, call.function.arguments).ok;
}

interface ToolOutcome {
  content: string;
  isError: boolean;
  /** The call itself was wrong (unknown tool, arguments not matching the schema). */
  invalidCall?: boolean;
  waitFor?: string;
  /** The call is answered from outside the loop (no result is stored now). */
  outside?: boolean;
}

function stringifyResult(value: unknown): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value);
  } catch {
    return '(the tool returned a value that cannot be shown as text)';
  }
}

/** A model call's usage in the stored vocabulary (cache counts only when the provider reports them). */
export function callUsageOf(response: ModelResponse): TokenUsage {
  const usage = response.usage;
  return {
    input_tokens: usage?.prompt_tokens ?? 0,
    output_tokens: usage?.completion_tokens ?? 0,
    ...(usage?.cache_read_tokens !== undefined
      ? { cache_read_tokens: usage.cache_read_tokens }
      : {}),
    ...(usage?.cache_write_tokens !== undefined
      ? { cache_write_tokens: usage.cache_write_tokens }
      : {}),
    ...(typeof response.cost === 'number' ? { cost: response.cost } : {}),
  };
}

function addUsage(total: TokenUsage, call: TokenUsage): void {
  total.input_tokens += call.input_tokens;
  total.output_tokens += call.output_tokens;
  if (call.cache_read_tokens !== undefined)
    total.cache_read_tokens = (total.cache_read_tokens ?? 0) + call.cache_read_tokens;
  if (call.cache_write_tokens !== undefined)
    total.cache_write_tokens = (total.cache_write_tokens ?? 0) + call.cache_write_tokens;
  // A turn's cost is known once one of its calls was priced.
  if (call.cost !== undefined) total.cost = (total.cost ?? 0) + call.cost;
}

export async function runLoop(options: LoopOptions): Promise<LoopResult> {
  const { model, tools, signal } = options;
  let messages = options.messages;
  const usage: TokenUsage = { input_tokens: 0, output_tokens: 0 };
  // Notes for the next call only (never persisted): an empty-reply nudge or a
  // truncated-tool-call warning.
  let note: string | undefined;
  let emptyReplies = 0;
  // Consecutive replies whose tool calls were malformed: each one is a
  // correction round, and the model gets at most MAX_CORRECTION_ROUNDS.
  let badRounds = 0;
  const checkCorrections = (): void => {
    if (badRounds > MAX_CORRECTION_ROUNDS) {
      throw new CairnError(
        'LLM_ERROR',
        `The model sent invalid tool calls ${badRounds} times in a row; stopping after ${MAX_CORRECTION_ROUNDS} correction rounds. Try again or use a model that handles tools better.`,
      );
    }
  };

  for (let iteration = 1; iteration <= options.maxIterations; iteration++) {
    signal?.throwIfAborted();
    messages = await options.turn.prepare(messages);
    const sent = options.turn.forRequest?.(messages) ?? messages;
    const outgoing = normalizeOutgoing(note ? [...sent, { role: 'user', content: note }] : sent);
    note = undefined;
    const recalledSeqs = options.turn.recalledSeqs?.();
    const request: ModelRequest = {
      messages: outgoing,
      ...(tools.size > 0 ? { tools: tools.specs() } : {}),
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(options.modelName !== undefined ? { model: options.modelName } : {}),
      purpose: 'chat',
      ...(recalledSeqs !== undefined && recalledSeqs.length > 0 ? { recalledSeqs } : {}),
      // Calls of one session share their prefix: one cache key keeps them on one cache.
      promptCacheKey: options.toolContext.sessionId,
    };
    // After prepare: an automatic compaction it ran counts against the turn.
    options.budget?.beforeModelCall(usage, request);
    const reservation = await options.reserve?.(request);
    let assistant: ChatMessage;
    let calls: ToolCall[];
    let text: string;
    // The reservation ends once the call's usage is stored with its message
    // (the same write charges the owner key), or when nothing is stored.
    try {
      const response = await model.complete(request, {
        ...(signal ? { signal } : {}),
        ...(options.scope ? { scope: options.scope } : {}),
        ...(options.stream
          ? { onDelta: (delta: string) => options.onEvent?.({ type: 'delta', text: delta }) }
          : {}),
      });
      await settleOverrun(reservation, response);
      const callUsage = callUsageOf(response);
      addUsage(usage, callUsage);
      const reply = response.message;
      calls = reply.tool_calls ?? [];

      if (calls.length > 0 && response.finishReason === 'length') {
        // Arguments cut at max_tokens are not JSON we can trust: run nothing,
        // store nothing, tell the model, and never replay the cut arguments.
        note = TRUNCATED_TOOL_CALL_NOTE;
        badRounds += 1;
        checkCorrections();
        continue;
      }
      text = reply.content ?? '';
      if (calls.length === 0 && text.trim() === '') {
        emptyReplies += 1;
        if (emptyReplies > 1) {
          throw new CairnError(
            'LLM_ERROR',
            'The model returned an empty reply twice. Try again or use another model.',
          );
        }
        note = EMPTY_REPLY_NUDGE;
        continue;
      }

      assistant =
        calls.length > 0
          ? { role: 'assistant', content: text.trim() === '' ? null : text, tool_calls: calls }
          : { role: 'assistant', content: text };
      await options.turn.persist([assistant], callUsage, response.usage?.prompt_tokens);
    } finally {
      await reservation?.release();
    }
    messages = [...messages, assistant];
    if (calls.length === 0) return { kind: 'answer', reply: text, usage };

    // Calls that stop the loop (approval, ask_user) run last, so the other
    // calls of the same turn have their results.
    const ordered = [...calls].sort((a, b) => callRank(a, tools) - callRank(b, tools));
    let invalidCalls = false;
    const outside: ToolCall[] = [];
    for (const [index, call] of ordered.entries()) {
      options.onEvent?.({ type: 'tool_call', call });
      if (needsApproval(call, tools)) {
        // Client-side calls seen so far are not sent out either: the turn stops here.
        const rest = [...outside, ...ordered.slice(index + 1)].map((c): ChatMessage => ({
          role: 'tool',
          tool_call_id: c.id,
          name: c.function.name,
          content: NOT_RUN_TOOL_RESULT,
        }));
        if (rest.length > 0) await options.turn.persist(rest);
        const approvalTimeout = tools.find(call.function.name)?.approvalTimeout;
        return {
          kind: 'pending',
          reason: 'approval',
          call,
          usage,
          ...(approvalTimeout !== undefined ? { approvalTimeout } : {}),
        };
      }
      if (options.budget && !options.budget.takeToolCall()) {
        // Every call of the reply gets a result, so the stored history stays valid.
        const notRun = [...outside, ...ordered.slice(index)].map((c): ChatMessage => ({
          role: 'tool',
          tool_call_id: c.id,
          name: c.function.name,
          content: OVER_BUDGET_TOOL_RESULT,
        }));
        await options.turn.persist(notRun);
        throw options.budget.toolCallsExceeded();
      }
      const outcome = await runTool(call, options);
      invalidCalls ||= outcome.invalidCall === true;
      if (outcome.waitFor !== undefined) {
        return { kind: 'waiting', question: outcome.waitFor, callId: call.id, usage };
      }
      if (outcome.outside) {
        outside.push(call);
        continue;
      }
      const result: ChatMessage = {
        role: 'tool',
        tool_call_id: call.id,
        name: call.function.name,
        content: outcome.content,
      };
      await options.turn.persist([result]);
      messages = [...messages, result];
      options.onEvent?.({
        type: 'tool_result',
        callId: call.id,
        name: call.function.name,
        content: outcome.content,
        isError: outcome.isError,
      });
      if (signal?.aborted) await persistCancelled(ordered, messages, options);
      signal?.throwIfAborted();
    }
    if (outside.length > 0) return { kind: 'outside', reply: text, calls: outside, usage };
    badRounds = invalidCalls ? badRounds + 1 : 0;
    checkCorrections();
  }
  throw new CairnError(
    'MAX_ITERATIONS',
    `The agent made ${options.maxIterations} model calls (its maxIterations) without a final answer. Raise maxIterations in agent.json or simplify the request.`,
  );
}

/** Gives every call of the turn that has no result yet a "cancelled" result. */
async function persistCancelled(
  calls: ToolCall[],
  messages: ChatMessage[],
  options: LoopOptions,
): Promise<void> {
  const answered = new Set(messages.filter((m) => m.role === 'tool').map((m) => m.tool_call_id));
  const missing = calls
    .filter((c) => !answered.has(c.id))
    .map((c): ChatMessage => ({
      role: 'tool',
      tool_call_id: c.id,
      name: c.function.name,
      content: CANCELLED_TOOL_RESULT,
    }));
  if (missing.length > 0) await options.turn.persist(missing);
}

/**
 * Runs one call outside the loop (a call a person approved) and returns its
 * result message; every failure becomes a result the model can read.
 */
export async function runApprovedToolCall(
  call: ToolCall,
  options: Pick<LoopOptions, 'tools' | 'toolContext' | 'signal'> & {
    /** Told whether the call failed, as the loop's `tool_result` event tells it. */
    onResult?: (isError: boolean) => void;
  },
): Promise<ChatMessage> {
  const outcome = await runTool(call, options);
  options.onResult?.(outcome.isError);
  return {
    role: 'tool',
    tool_call_id: call.id,
    name: call.function.name,
    content: outcome.content === '' ? EMPTY_TOOL_RESULT : outcome.content,
  };
}

/** Runs one call; every failure becomes a result the model can read. */
async function runTool(
  call: ToolCall,
  options: Pick<LoopOptions, 'tools' | 'toolContext' | 'signal'>,
): Promise<ToolOutcome> {
  const tool = options.tools.find(call.function.name);
  if (!tool) {
    return {
      content: `Error: there is no tool named "${call.function.name}". Available tools: ${options.tools.names().join(', ') || 'none'}.`,
      isError: true,
      invalidCall: true,
    };
  }
  const parsed = options.tools.parseArguments(tool, call.function.arguments);
  if (!parsed.ok) return { content: `Error: ${parsed.error}`, isError: true, invalidCall: true };

  const timeoutMs = tool.timeoutMs ?? TOOL_TIMEOUT_MS;
  const controller = new AbortController();
  const onOuterAbort = (): void => controller.abort(options.signal?.reason);
  options.signal?.addEventListener('abort', onOuterAbort, { once: true });
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      // Reject before aborting: the abort settles `cancelled` synchronously,
      // and the race must report the timeout, not a cancellation.
      reject(new CairnError('INTERNAL', `the tool did not finish within ${timeoutMs} ms`));
      controller.abort(new Error('timeout'));
    }, timeoutMs);
  });
  const cancelled = new Promise<never>((_, reject) => {
    controller.signal.addEventListener('abort', () => reject(new Error('cancelled')), {
      once: true,
    });
  });
  try {
    const value = await Promise.race([
      tool.run(parsed.args, { ...options.toolContext, callId: call.id, signal: controller.signal }),
      timeout,
      cancelled,
    ]);
    if (isWaitForUser(value)) return { content: '', isError: false, waitFor: value.question };
    if (isOutsideAnswer(value)) return { content: '', isError: false, outside: true };
    const content = stringifyResult(value);
    return { content: content.trim() === '' ? EMPTY_TOOL_RESULT : content, isError: false };
  } catch (err) {
    if (options.signal?.aborted) return { content: CANCELLED_TOOL_RESULT, isError: true };
    return {
      content: `Error: the tool "${tool.name}" failed: ${describeError(err)}`,
      isError: true,
    };
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onOuterAbort);
  }
}
