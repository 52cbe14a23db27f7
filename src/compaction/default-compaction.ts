/**
 * `DefaultCompaction.run`: plan the cut (pure), ask the
 * `compact` model for the updated summary, then one compare-and-set write.
 * No lock is held while the model writes, so chats go on meanwhile; a
 * compaction that lost a race fails with COMPACTION_CONFLICT and changes
 * nothing. Concurrent compactions of one session share one flight (one summary
 * call, never two).
 * Raw messages are never deleted.
 */
import type { AgentRegistry } from '../agents/agent-registry.js';
import { DEFAULT_MAX_SUMMARY_CHARS } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import type { ChatMessage } from '../llm/messages.js';
import type { ModelCallScope, ModelClient, ModelRequest } from '../llm/model-client.js';
import { callReserved, claimedTokens, type Budget, type Reservation } from '../runtime/budget.js';
import { holdSessionTokens, sessionTokens } from '../runtime/turn-budget.js';
import { inSpan, NO_TRACING, spanOf, type TraceSpan, type Tracing } from '../telemetry/tracing.js';
import type { EventBus } from '../runtime/event-bus.js';
import type { TurnWrites } from '../runtime/turn-writes.js';
import type {
  CompactionStore,
  CompactionTrigger,
  MessageLog,
  NewCompaction,
  PreparedSummary,
  SessionRow,
  SessionStore,
  TaskStore,
} from '../store/store.js';
import { requireSession } from '../store/session-not-found.js';
import { planCut, safeBoundaries } from './cut.js';
import { CHARS_PER_TOKEN, estimateMessagesTokens } from '../llm/tokens.js';
import { findDropped } from './dropped.js';
import {
  capSummary,
  clipMiddle,
  MESSAGE_CLIP_CHARS,
  TOOL_OUTPUT_CLIP_CHARS,
  summaryRequest,
  transcriptEntry,
  type SummaryFormat,
} from './prompt.js';

/**
 * A transcript entry longer than the whole input budget, clipped to it (head
 * and tail kept): the first message of a batch is folded even alone over the
 * budget, and must still leave a request that fits the window.
 */
function fitEntry(entry: string, budget: number): string {
  return clipMiddle(entry, Math.max(MIN_INPUT_BUDGET_CHARS, budget));
}

/** A message's own text and tool-call arguments, clipped as the summariser's input clips them. */
function foldedText(message: ChatMessage): string {
  const clip = message.role === 'tool' ? TOOL_OUTPUT_CLIP_CHARS : MESSAGE_CLIP_CHARS;
  const parts = [clipMiddle(message.content ?? '', clip)];
  for (const call of message.tool_calls ?? [])
    parts.push(clipMiddle(call.function.arguments, TOOL_OUTPUT_CLIP_CHARS));
  return parts.join('\n');
}

/** Messages loaded per page while building the summariser's input. */
const BATCH_PAGE = 1_000;
/** Tokens kept free in the compact model's window besides the summary itself. */
const PROMPT_RESERVE_TOKENS = 1_500;
/**
 * The summary asked for is cut to the room the compact model's window has
 * left beside its input; below this many tokens of room the call is not made
 * (the window check refuses it), since no useful summary fits.
 */
export const MIN_SUMMARY_TOKENS = 64;
/**
 * The provider's tokenizer may count a prompt higher than Cairn's: the room
 * left for a shortened summary assumes up to this much more.
 */
const OTHER_TOKENIZER_MARGIN = 1.25;
/** Input is never under this many characters (a smaller window gets what fits). */
const INPUT_FLOOR_CHARS = 4_000;
/** A transcript entry is never clipped below this many characters. */
const MIN_INPUT_BUDGET_CHARS = 1_000;

export type { CompactionTrigger } from '../store/store.js';

/**
 * A summary computed for a session's pointer and not yet written: what the
 * compare-and-set lands (now, or at the next turn's start when it was
 * prepared in the background).
 */
export type SummaryDraft = Omit<PreparedSummary, 'holder'> & {
  /**
   * The summary call's token reservation, while this process holds the
   * draft: it ends once the landing write (which charges the key) is done,
   * or once a background draft is stored. A draft read back from the
   * database has none.
   */
  readonly reservation?: Reservation;
};

export interface CompactOptions {
  sessionId: string;
  trigger: CompactionTrigger;
  dryRun?: boolean;
  instructions?: string;
  /** Automatic compaction: the cut must stay before this seq (the running turn). */
  beforeSeq?: number;
  /** The trace span of the turn that compacts: the `cairn.compaction` span is its child. */
  parentSpan?: unknown;
  /** The task whose run compacts: the write is refused once a peer took the task over. */
  runningTask?: string;
  /**
   * The write port of the turn that compacts (automatic compaction): the
   * summary is computed without the lock, and lands through the port, which
   * refuses it once the turn's slot is lost. A manual compaction has none:
   * it lands by its compare-and-set alone.
   */
  door?: Pick<TurnWrites, 'landCompaction' | 'emit'>;
  /**
   * Throws when the summary's claim would pass a limit of the turn that
   * compacts (the agent's maxTurnTokens): nothing is asked of the model.
   */
  hold?: (claim: number) => void;
}

export interface CompactResult {
  sessionId: string;
  compactedCount: number;
  newSize: number;
  alreadyUpToDate: boolean;
  session: SessionRow;
  /** Token usage of this compaction's summary call (0 and 0 when nothing was compacted). */
  input_tokens: number;
  output_tokens: number;
}

export interface DryRunResult {
  sessionId: string;
  dryRun: true;
  compactedCount: number;
  newSize: number;
  batchChars: number;
  totalChars: number;
}

export interface CompactionDeps {
  store: SessionStore & MessageLog & CompactionStore & Pick<TaskStore, 'findWaitingTaskForSession'>;
  events: EventBus;
  agents: AgentRegistry;
  /** The `compact` role (falls back to `main`). */
  model: ModelClient;
  /** A `cairn.compaction` span per compaction. */
  tracing?: Tracing;
  /** The session owner's token budget: a summary reserves its tokens like a turn's call. */
  budget?: Budget;
}

export class DefaultCompaction {
  /** The compaction running for each session; later callers join it, never a second summary. */
  private readonly flights = new Map<string, Promise<CompactResult>>();

  constructor(private readonly deps: CompactionDeps) {}

  /**
   * Compacts one session. A dry run never calls the model, so it runs on its
   * own; a real compaction joins the one already in flight for the session,
   * if any, and reports its outcome (result or error): one summary is paid
   * for, and callers never race each other into COMPACTION_CONFLICT.
   */
  async run(options: CompactOptions & { dryRun: true }): Promise<DryRunResult>;
  async run(options: CompactOptions): Promise<CompactResult | DryRunResult>;
  async run(options: CompactOptions): Promise<CompactResult | DryRunResult> {
    if (options.dryRun) return this.runOnce(options, undefined);
    const inFlight = this.flights.get(options.sessionId);
    if (inFlight) return inFlight;
    const flight = this.traced(options);
    this.flights.set(options.sessionId, flight);
    try {
      return await flight;
    } finally {
      this.flights.delete(options.sessionId);
    }
  }

  /** `runOnce` inside a `cairn.compaction` span (what was folded, the summary's size, the trigger, tokens). */
  private async traced(options: CompactOptions): Promise<CompactResult> {
    const tracing = this.deps.tracing ?? NO_TRACING;
    // Never a dry run here: `run` answers those without a flight or a span.
    if (!tracing.enabled) return (await this.runOnce(options, undefined)) as CompactResult;
    const span = tracing.startSpan('cairn.compaction', {
      parent: spanOf(options.parentSpan),
      attributes: {
        'gen_ai.conversation.id': options.sessionId,
        'cairn.compaction.trigger': options.trigger,
      },
    });
    return inSpan(
      span,
      async () => (await this.runOnce(options, span)) as CompactResult,
      (result) => ({
        'cairn.compaction.messages_folded': result.compactedCount,
        'cairn.compaction.summary_chars': result.session.compact_summary?.length ?? 0,
        'cairn.compaction.compacted_size': result.newSize,
        'cairn.compaction.already_up_to_date': result.alreadyUpToDate,
        'gen_ai.usage.input_tokens': result.input_tokens,
        'gen_ai.usage.output_tokens': result.output_tokens,
      }),
      (err) => (err instanceof Error ? err.message : 'The compaction failed.'),
    );
  }

  private async runOnce(
    options: CompactOptions,
    span: TraceSpan | undefined,
  ): Promise<CompactResult | DryRunResult> {
    // The session as it is now: the compare-and-set checks it is unchanged.
    const session = requireSession(
      await this.deps.store.findSession(options.sessionId),
      options.sessionId,
    );
    const drafted = await this.draft(session, options, span);
    if (!('summary' in drafted)) return drafted;
    return this.land(drafted, options);
  }

  /**
   * Plans the cut over `session` as read and asks the `compact` model for the
   * updated summary; writes nothing. A dry run, or nothing to fold, answers
   * without a model call.
   */
  async draft(
    session: SessionRow,
    options: Omit<CompactOptions, 'sessionId'>,
    span?: TraceSpan,
  ): Promise<SummaryDraft | CompactResult | DryRunResult> {
    const { store } = this.deps;
    if (session.status === 'closed') {
      throw new CairnError(
        'SESSION_CLOSED',
        `Session "${session.id}" is closed; closed sessions are not compacted.`,
      );
    }
    const upToDate = (): CompactResult => ({
      sessionId: session.id,
      compactedCount: 0,
      newSize: session.compact_size,
      alreadyUpToDate: true,
      session,
      input_tokens: 0,
      output_tokens: 0,
    });

    // Plan the cut over metadata only (no contents), so 100 000 messages stay cheap.
    const metas = await store.listMessageMeta(session.id, session.compact_seq);
    const maxCutoff =
      options.beforeSeq === undefined
        ? undefined
        : metas.filter((m) => m.seq < options.beforeSeq!).length;
    // A call waiting for approval or an answer stays raw, and so does what follows it.
    const pendingCallId =
      (await store.findWaitingTaskForSession(session.id))?.pending_call_id ?? undefined;
    const summary = session.compact_summary ?? '';
    const plan = planCut(metas, summary.length, session.compact_count, {
      ...(maxCutoff === undefined ? {} : { maxCutoff }),
      ...(pendingCallId === undefined ? {} : { pendingCallId }),
    });
    // The summariser's input must fit its own context window: when the batch
    // is larger, compact a shorter, still tool-safe, prefix now. A dry run
    // applies the same limit (loading contents, never calling the model), so
    // it reports exactly what a real compaction would do.
    const maxSummaryChars = this.summaryCharsFor(session.agent_name);
    const request = await this.buildInput(session, plan.cutoff, maxSummaryChars, metas);
    if (options.dryRun) {
      let batchChars = 0;
      for (let i = 0; i < request.cutoff; i++) batchChars += metas[i]!.chars;
      return {
        sessionId: session.id,
        dryRun: true,
        compactedCount: request.cutoff,
        newSize: session.compact_size + request.cutoff,
        batchChars,
        totalChars: plan.totalChars,
      };
    }
    if (request.cutoff === 0) return upToDate();
    // Said before the summary call, which may take seconds: the turn that waits for it can show why.
    if (options.trigger !== 'manual') {
      await this.deps.events.emit('context.compacting', session.id, {
        trigger: options.trigger,
        messages: request.cutoff,
      });
    }

    // The summary call; no lock is held meanwhile.
    const { messages, maxTokens } = summaryRequest({
      previousSummary: session.compact_summary,
      transcript: request.transcript,
      ...(options.instructions !== undefined ? { instructions: options.instructions } : {}),
      maxSummaryChars,
      format: this.formatOf(session.agent_name),
    });
    const {
      summary: newSummary,
      usage,
      reservation,
    } = await this.summarize(
      { sessionId: session.id, ...(span ? { span } : {}) },
      session.owner_key,
      messages,
      maxTokens,
      maxSummaryChars,
      // The summary's tokens count toward the turn's and the session's: held before the call.
      (claim) => {
        options.hold?.(claim);
        holdSessionTokens(
          session.agent_name,
          this.deps.agents.find(session.agent_name)?.limits ?? {},
          sessionTokens(session),
          claim,
        );
      },
    );

    return {
      sessionId: session.id,
      expectedSize: session.compact_size,
      expectedEpoch: session.epoch,
      messages: request.cutoff,
      toSize: session.compact_size + request.cutoff,
      toSeq: metas[request.cutoff - 1]!.seq,
      summary: newSummary,
      model: this.deps.model.model,
      inputChars: request.inputChars,
      dropped: findDropped(request.folded, newSummary),
      inputTokens: usage.input_tokens,
      outputTokens: usage.output_tokens,
      ...(reservation ? { reservation } : {}),
    };
  }

  /**
   * Writes `draft` with a compare-and-set: it lands only if nobody compacted
   * or reset the session since it was read (else COMPACTION_CONFLICT,
   * nothing changed), through `options.door` when given.
   */
  async land(
    draft: SummaryDraft,
    options: Pick<CompactOptions, 'door' | 'runningTask'> & { trigger: CompactionTrigger },
  ): Promise<CompactResult> {
    const { door } = options;
    const land = (input: Omit<NewCompaction, 'sessionId'>) =>
      door
        ? door.landCompaction(input)
        : this.deps.store.commitCompaction({ ...input, sessionId: draft.sessionId });
    // The landing write charges the summary's tokens: the reservation ends after it, either way.
    const updated = await land({
      expectedSize: draft.expectedSize,
      expectedEpoch: draft.expectedEpoch,
      toSize: draft.toSize,
      toSeq: draft.toSeq,
      summary: draft.summary,
      trigger: options.trigger,
      model: draft.model,
      inputChars: draft.inputChars,
      dropped: draft.dropped,
      inputTokens: draft.inputTokens,
      outputTokens: draft.outputTokens,
      ...(options.runningTask !== undefined ? { runningTask: options.runningTask } : {}),
    }).finally(() => draft.reservation?.release());
    if (!updated) {
      throw new CairnError(
        'COMPACTION_CONFLICT',
        `Session "${draft.sessionId}" was compacted or reset by someone else meanwhile; nothing was changed. Retry if still needed.`,
      );
    }
    // Announced only once committed, through the turn's port when it compacts.
    await (door ?? this.deps.events).emit('context.defaultCompacted', draft.sessionId, {
      compactedCount: draft.messages,
      newSize: updated.compact_size,
      summaryChars: draft.summary.length,
      trigger: options.trigger,
    });
    return {
      sessionId: draft.sessionId,
      compactedCount: draft.messages,
      newSize: updated.compact_size,
      alreadyUpToDate: false,
      session: updated,
      input_tokens: draft.inputTokens,
      output_tokens: draft.outputTokens,
    };
  }

  /** Reverts the latest compaction: possible because raw messages are never deleted. */
  async undo(
    sessionId: string,
  ): Promise<{ sessionId: string; restoredSize: number; session: SessionRow }> {
    requireSession(await this.deps.store.findSession(sessionId), sessionId);
    const undone = await this.deps.store.undoCompaction(sessionId);
    if (!undone) {
      throw new CairnError(
        'COMPACTION_CONFLICT',
        'Nothing to undo: only the latest compaction can be undone, once, and only while no other compaction or reset landed after it.',
      );
    }
    await this.deps.events.emit('context.compactionUndone', sessionId, {
      restoredSize: undone.restoredSize,
    });
    return { sessionId, restoredSize: undone.restoredSize, session: undone.session };
  }

  /**
   * `compactMessages`: the last resort of context-overflow recovery. Summarises
   * the summary so far plus `messages` (the rest of the history before the
   * running turn) into one summary, used in memory only (never stored), and
   * emits `context.compacted`.
   */
  async compactMessages(
    sessionId: string,
    agentName: string,
    messages: readonly ChatMessage[],
    previousSummary: string | null,
  ): Promise<string> {
    const maxSummaryChars = this.summaryCharsFor(agentName);
    const budget = this.inputBudgetChars(maxSummaryChars) - (previousSummary?.length ?? 0);
    const transcript: string[] = [];
    let used = 0;
    // Newest first, so the most recent context survives when the budget is short.
    // The newest is always folded, even alone over the budget (as a compaction's
    // first message is): a summary of no messages would drop them all unread.
    for (let i = messages.length - 1; i >= 0; i--) {
      const entry = fitEntry(transcriptEntry(messages[i]!), budget);
      if (used + entry.length > budget && transcript.length > 0) break;
      transcript.unshift(entry);
      used += entry.length;
    }
    const request = summaryRequest({
      previousSummary,
      transcript,
      maxSummaryChars,
      format: this.formatOf(agentName),
    });
    // Only a budget needs the owner: a read on this rare path, never on a turn's.
    const ownerKey = this.deps.budget
      ? ((await this.deps.store.findSession(sessionId))?.owner_key ?? null)
      : null;
    const { summary, usage, reservation } = await this.summarize(
      { sessionId },
      ownerKey,
      request.messages,
      request.maxTokens,
      maxSummaryChars,
    );
    // This summary is never stored, so no write charges it: the reservation does.
    await reservation?.charge(usage.input_tokens + usage.output_tokens);
    await this.deps.events.emit('context.compacted', sessionId, {
      messageCount: messages.length,
      summaryChars: summary.length,
    });
    return summary;
  }

  /** The agent's summary format (sections unless it asks for prose). */
  private formatOf(agentName: string): SummaryFormat {
    return this.deps.agents.find(agentName)?.defaultCompaction.summaryFormat ?? 'sections';
  }

  private summaryCharsFor(agentName: string): number {
    return (
      this.deps.agents.find(agentName)?.defaultCompaction.maxSummaryChars ??
      DEFAULT_MAX_SUMMARY_CHARS
    );
  }

  private inputBudgetChars(maxSummaryChars: number): number {
    const summaryTokens = Math.ceil(maxSummaryChars / CHARS_PER_TOKEN);
    return Math.max(
      INPUT_FLOOR_CHARS,
      (this.deps.model.contextWindow - summaryTokens - PROMPT_RESERVE_TOKENS) * CHARS_PER_TOKEN,
    );
  }

  /**
   * Loads the batch page by page until it is complete or the summariser's
   * budget is full; a cutoff of 0 loads nothing.
   */
  private async buildInput(
    session: SessionRow,
    cutoff: number,
    maxSummaryChars: number,
    metas: readonly {
      seq: number;
      role: ChatMessage['role'];
      chars: number;
      callIds?: readonly string[];
      toolCallId?: string;
    }[],
  ): Promise<{
    cutoff: number;
    transcript: string[];
    inputChars: number;
    /** The folded messages' texts, clipped as the summariser read them: what `dropped` is looked for in. */
    folded: { seq: number; text: string }[];
  }> {
    const budget = this.inputBudgetChars(maxSummaryChars) - (session.compact_summary?.length ?? 0);
    const transcript: string[] = [];
    const folded: { seq: number; text: string }[] = [];
    let used = 0;
    let afterSeq = session.compact_seq;
    let fits = 0;
    while (fits < cutoff) {
      const page = await this.deps.store.listTail(
        session.id,
        afterSeq,
        Math.min(BATCH_PAGE, cutoff - fits),
      );
      if (page.length === 0) break;
      let full = false;
      for (const message of page) {
        const entry = fitEntry(transcriptEntry(message), budget);
        if (used + entry.length > budget && fits > 0) {
          full = true;
          break;
        }
        transcript.push(entry);
        folded.push({ seq: message.seq, text: foldedText(message) });
        used += entry.length;
        fits += 1;
      }
      if (full) break;
      afterSeq = page[page.length - 1]!.seq;
    }
    // Shrink to the last tool-safe boundary that fits: the cut itself when all
    // of the batch fits, since the planner only cuts where it is safe.
    const safe = safeBoundaries(metas);
    let shrunk = fits;
    while (shrunk > 0 && !safe[shrunk]) shrunk -= 1;
    const kept = transcript.slice(0, shrunk);
    return {
      cutoff: shrunk,
      transcript: kept,
      inputChars: kept.reduce((n, e) => n + e.length, 0),
      folded: folded.slice(0, shrunk),
    };
  }

  /** One summary call, with no tools; empty or non-text output is an error, never stored. */
  private async summarize(
    scope: ModelCallScope,
    ownerKey: string | null,
    messages: ChatMessage[],
    maxTokens: number,
    maxSummaryChars: number,
    /** Throws when the call's claim would pass a limit other than the key's (nothing is sent). */
    hold?: (claim: number) => void,
  ): Promise<{
    summary: string;
    usage: { input_tokens: number; output_tokens: number };
    /** Held until the summary lands (the caller ends it). */
    reservation: Reservation | undefined;
  }> {
    // A small window (under the input floor) cannot hold the whole summary the
    // agent allows beside the input: ask for what fits, so the request does.
    const room =
      this.deps.model.contextWindow -
      Math.ceil(estimateMessagesTokens(messages) * OTHER_TOKENIZER_MARGIN);
    const fittingMaxTokens = Math.max(MIN_SUMMARY_TOKENS, Math.min(maxTokens, room));
    const request: ModelRequest = {
      messages,
      maxTokens: fittingMaxTokens,
      temperature: 0,
      purpose: 'summary',
    };
    const claim = claimedTokens(request, 0);
    hold?.(claim);
    const reservation = await this.deps.budget?.reserve(ownerKey, claim);
    let response;
    try {
      response = await callReserved(reservation, () =>
        this.deps.model.complete(request, { scope }),
      );
    } catch (err) {
      if (err instanceof CairnError && (err.code === 'LLM_ERROR' || err.code === 'LLM_TIMEOUT'))
        throw err;
      throw new CairnError('LLM_ERROR', 'The summary model call failed; nothing was changed.', {
        cause: err,
      });
    }
    const text = response.message.content ?? '';
    if (response.message.tool_calls?.length || text.trim() === '') {
      await reservation?.release();
      throw new CairnError(
        'COMPACTION_EMPTY_SUMMARY',
        'LLM returned an empty summary; nothing was changed. Try again, or use another compact model.',
      );
    }
    return {
      summary: capSummary(text, maxSummaryChars),
      // A provider that reports no usage costs nothing we can count.
      usage: {
        input_tokens: response.usage?.prompt_tokens ?? 0,
        output_tokens: response.usage?.completion_tokens ?? 0,
      },
      reservation,
    };
  }
}
