/**
 * Automatic compaction and context-overflow recovery, plugged
 * into the turn engine as its `ContextGuard`:
 * - before every model call, estimate the prompt as sent (last reported
 *   usage + a tokenizer estimate of what was added since, less the old tool
 *   results the call clears that the last one sent whole), add the room automatic
 *   recall may take in it, and run defaultCompaction at or above
 *   `autoThreshold`% of the context window (80 unless the agent sets it; 0 is
 *   off), never covering the running turn;
 * - a breaker suspends it for the session when a compaction does not bring
 *   the estimate down by 5% or three in a row fail (having nothing to compact
 *   before the running turn does not trip it);
 * - from `prepareAt`% of the window, the next summary is prepared after
 *   the turn's reply (`BackgroundCompaction`) and landed at the next turn's
 *   start; with one prepared or being prepared, a call at the threshold does
 *   not wait for a summariser unless the request would not fit the window;
 * - a provider context-length error: compact and retry once, then
 *   `compactMessages` for this run, then CONTEXT_OVERFLOW.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError, describeError } from '../errors.js';
import type { ChatMessage } from '../llm/messages.js';
import type { ModelClient, ModelRequest } from '../llm/model-client.js';
import { estimateMessagesTokens } from '../llm/tokens.js';
import { normalizeOutgoing } from '../llm/normalize-request.js';
import type { CompactionDone, ContextGuard, GuardedTurn } from '../runtime/context-guard.js';
import type { SessionRow } from '../store/store.js';
import type {
  CompactOptions,
  CompactResult,
  DefaultCompaction,
  DryRunResult,
} from './default-compaction.js';
import type { BackgroundCompaction } from './background-compaction.js';

/** The run's session slot or task was taken over: it must stop and write nothing more. */
function lostTheRun(err: unknown): boolean {
  return err instanceof CairnError && err.code === 'SESSION_LOCK_LOST';
}

/** A compaction must cut the estimate by at least this fraction, or auto-compaction is suspended. */
export const MIN_PROGRESS_FRACTION = 0.05;
/** Consecutive failed automatic compactions before auto-compaction is suspended. */
export const MAX_CONSECUTIVE_FAILURES = 3;
/**
 * The room kept for automatic recall is at most this share of the threshold:
 * in a small window, recall's full budget would otherwise make every call compact.
 */
export const RECALL_RESERVE_MAX_SHARE = 0.25;
/** Upper bound on messages read to estimate what was added since the last call. */
const SINCE_LIMIT = 10_000;
/**
 * A turn looks for a prepared summary only when the session's last reported
 * prompt is at least this share of the `prepareAt` limit (or this process
 * prepared one): below it none can exist, and the turn spends no statement.
 */
const LANDING_GATE_SHARE = 0.5;

/**
 * Compaction as a turn runs it: a run lands through the turn's write port,
 * which it must be given (a manual compaction, which lands by its
 * compare-and-set alone, is not the guard's to run).
 */
export interface TurnCompaction {
  run(
    options: CompactOptions & Required<Pick<CompactOptions, 'door'>>,
  ): Promise<CompactResult | DryRunResult>;
  compactMessages: DefaultCompaction['compactMessages'];
}

/** No store: what a turn's compaction writes goes through the turn's port. */
export interface AutoCompactionDeps {
  compaction: TurnCompaction;
  /** Context window of the main model, in tokens. */
  contextWindow: number;
  logger?: { warn(details: Record<string, unknown>, message: string): void };
  /**
   * Tokens of the recall block the session's last call carried: part of its
   * reported prompt, but replaced (not kept) by the next call.
   */
  recalledTokens?: (sessionId: string) => number;
  /** Summaries prepared off the turn (`prepareAt`); without it, every compaction runs on the turn. */
  background?: BackgroundCompaction;
  /** Output tokens the main model's requests ask for when they set none (counted against the window). */
  outputTokens?: number;
}

/**
 * Tokens the guard keeps free below its threshold for the block automatic
 * recall adds to the call: recall's `maxTokens`, capped at
 * RECALL_RESERVE_MAX_SHARE of the threshold. None when recall is off, or
 * when the session has nothing compacted and the call clears no old tool
 * result (recall then has nothing to search).
 */
export function recallReserve(
  agent: Pick<AgentConfig, 'defaultCompaction'>,
  session: Pick<SessionRow, 'compact_seq'>,
  thresholdTokens: number,
  clearsToolResults = false,
): number {
  const recall = agent.defaultCompaction.recall;
  if (!recall.enabled || (session.compact_seq <= 0 && !clearsToolResults)) return 0;
  return Math.min(recall.maxTokens, Math.floor(thresholdTokens * RECALL_RESERVE_MAX_SHARE));
}

/** The call with `messages` sends an old tool result as a placeholder. */
function hasCleared(turn: GuardedTurn, messages: readonly ChatMessage[]): boolean {
  return (turn.clearing?.plan(messages).length ?? 0) > 0;
}

function isOverflow(err: unknown): boolean {
  return err instanceof CairnError && err.code === 'CONTEXT_OVERFLOW';
}

export class AutoCompaction implements ContextGuard {
  private readonly failures = new Map<string, number>();

  constructor(private readonly deps: AutoCompactionDeps) {}

  /**
   * Estimated prompt tokens of the turn's next call with `messages`: the
   * last reported prompt plus what was stored since, else the whole context.
   */
  async estimate(turn: GuardedTurn, messages: readonly ChatMessage[]): Promise<number> {
    const { session, clearing } = turn;
    const cleared = clearing?.plan(messages) ?? [];
    if (session.last_prompt_tokens !== null && session.last_prompt_seq !== null) {
      const since = await turn.messagesAfter(session.last_prompt_seq, SINCE_LIMIT);
      if (since.length < SINCE_LIMIT) {
        const recalled = this.deps.recalledTokens?.(session.id) ?? 0;
        // The last call's reported prompt already had its own results cleared;
        // what this call clears beyond them (a new batch, or what was stored
        // since) is not sent, so it is taken off.
        const before = messages.slice(0, Math.max(0, messages.length - since.length));
        const newlyCleared = clearing
          ? clearing.savedTokens(cleared) - clearing.savedTokens(clearing.plan(before))
          : 0;
        return Math.max(
          0,
          session.last_prompt_tokens - recalled + estimateMessagesTokens(since) - newlyCleared,
        );
      }
    }
    return estimateMessagesTokens(clearing ? clearing.apply(messages, cleared) : messages);
  }

  async beforeModelCall(ctx: GuardedTurn, messages: ChatMessage[]): Promise<ChatMessage[]> {
    const threshold = ctx.agent.defaultCompaction.autoThreshold;
    if (threshold <= 0 || ctx.session.compaction_suspended) return messages;
    const limit = (threshold / 100) * this.deps.contextWindow;
    const before = await this.estimate(ctx, messages);
    // Recall's block goes into this call after the guard: its room is kept now.
    const reserve = recallReserve(ctx.agent, ctx.session, limit, hasCleared(ctx, messages));
    if (before + reserve < limit) return messages;

    const sessionId = ctx.session.id;
    const { background } = this.deps;
    if (background && ctx.agent.defaultCompaction.prepareAt > 0) {
      // The summary is made off the turn: this call goes ahead while it fits.
      if (!this.wouldOverflow(before, ctx)) {
        background.prepare(sessionId);
        return messages;
      }
      // It would not fit: wait for this process's preparation rather than pay a second summary.
      const landed = await this.landPrepared(ctx, background);
      if (landed) return landed;
    }
    try {
      const result = await this.deps.compaction.run({
        sessionId,
        trigger: 'auto',
        beforeSeq: ctx.turnStartSeq,
        parentSpan: ctx.traceSpan,
        ...(ctx.runningTask !== undefined ? { runningTask: ctx.runningTask } : {}),
        door: ctx.writes,
        hold: (claim) => ctx.holdSummary?.(claim),
      });
      if ('dryRun' in result) return messages;
      // Nothing before the running turn to compact (e.g. one oversized first
      // message) is no reason to trip the breaker: that planning cost no model
      // call, and the next turn has something to compact.
      if (result.alreadyUpToDate) return messages;
      this.failures.delete(sessionId);
      ctx.recordCompaction(result);
      const rebuilt = await ctx.rebuild();
      const after = estimateMessagesTokens(ctx.forRequest(rebuilt));
      if (after > before * (1 - MIN_PROGRESS_FRACTION)) {
        await this.suspend(
          ctx,
          result.session,
          `compaction only brought the estimate from ${before} to ${after} tokens`,
        );
      }
      return rebuilt;
    } catch (err) {
      // A run that was taken over stops: no retry, no breaker, no write.
      if (lostTheRun(err)) throw err;
      const failures = (this.failures.get(sessionId) ?? 0) + 1;
      this.failures.set(sessionId, failures);
      this.deps.logger?.warn(
        { sessionId, failures, error: describeError(err) },
        'automatic compaction failed',
      );
      if (failures >= MAX_CONSECUTIVE_FAILURES) {
        this.failures.delete(sessionId);
        await this.suspend(ctx, ctx.session, `${failures} automatic compactions in a row failed`);
      }
      return messages;
    }
  }

  async atTurnStart(
    ctx: GuardedTurn,
  ): Promise<(CompactionDone & { session: SessionRow }) | undefined> {
    const { background } = this.deps;
    const prepareAt = ctx.agent.defaultCompaction.prepareAt;
    if (!background || prepareAt <= 0) return undefined;
    const { session } = ctx;
    const gate = (prepareAt / 100) * this.deps.contextWindow * LANDING_GATE_SHARE;
    const mayHaveOne =
      background.expects(session.id) ||
      (session.last_prompt_tokens !== null && session.last_prompt_tokens >= gate);
    if (!mayHaveOne) return undefined;
    const landed = await background.land(ctx);
    return landed && { ...landed, trigger: 'background' };
  }

  afterTurn(ctx: GuardedTurn): void {
    const { background } = this.deps;
    const prepareAt = ctx.agent.defaultCompaction.prepareAt;
    if (!background || prepareAt <= 0 || ctx.session.compaction_suspended) return;
    const limit = (prepareAt / 100) * this.deps.contextWindow;
    this.estimate(ctx, []).then(
      (tokens) => {
        if (tokens + recallReserve(ctx.agent, ctx.session, limit) >= limit)
          background.prepare(ctx.session.id);
      },
      (err: unknown) =>
        this.deps.logger?.warn(
          { sessionId: ctx.session.id, error: describeError(err) },
          'could not estimate the prompt after a turn',
        ),
    );
  }

  /** Whether a request of `promptTokens` plus its requested output exceeds the window. */
  private wouldOverflow(promptTokens: number, ctx: GuardedTurn): boolean {
    const reserve = recallReserve(ctx.agent, ctx.session, this.deps.contextWindow);
    return promptTokens + reserve + (this.deps.outputTokens ?? 0) >= this.deps.contextWindow;
  }

  /** Waits for this process's preparation of the session, lands it, and rebuilds the context. */
  private async landPrepared(
    ctx: GuardedTurn,
    background: BackgroundCompaction,
  ): Promise<ChatMessage[] | undefined> {
    await background.pending(ctx.session.id);
    const landed = await background.land(ctx);
    if (!landed) return undefined;
    ctx.recordCompaction({ ...landed, trigger: 'background' });
    return ctx.rebuild();
  }

  /**
   * Wraps the main model: on a context-length error, compact and retry once;
   * if that overflows too (or could not compact), replace the history before
   * the running turn by one in-memory summary and retry once more; then fail
   * with CONTEXT_OVERFLOW. Never loops.
   */
  guardModel(model: ModelClient, ctx: GuardedTurn): ModelClient {
    const complete: ModelClient['complete'] = async (request, options) => {
      try {
        return await model.complete(request, options);
      } catch (err) {
        if (!isOverflow(err)) throw err;
      }
      const retry = async (
        messages: ChatMessage[],
      ): Promise<Awaited<ReturnType<ModelClient['complete']>> | undefined> => {
        const again = {
          ...request,
          messages: normalizeOutgoing(ctx.forRequest(messages)),
        } satisfies ModelRequest;
        // Outside the try: a retry past the agent's limits is refused, not retried.
        ctx.holdRetry?.(again);
        try {
          return await model.complete(again, options);
        } catch (err) {
          if (isOverflow(err)) return undefined;
          throw err;
        }
      };

      // A summary this process is preparing is waited for, not paid for twice.
      const { background } = this.deps;
      if (background && ctx.agent.defaultCompaction.prepareAt > 0) {
        const landed = await this.landPrepared(ctx, background);
        const answer = landed && (await retry(landed));
        if (answer) return answer;
      }

      const compacted = await this.deps.compaction
        .run({
          sessionId: ctx.session.id,
          trigger: 'auto',
          beforeSeq: ctx.turnStartSeq,
          parentSpan: ctx.traceSpan,
          ...(ctx.runningTask !== undefined ? { runningTask: ctx.runningTask } : {}),
          door: ctx.writes,
          hold: (claim) => ctx.holdSummary?.(claim),
        })
        .catch((err: unknown) => {
          if (lostTheRun(err)) throw err;
          return undefined;
        });
      if (compacted && !('dryRun' in compacted) && !compacted.alreadyUpToDate) {
        ctx.recordCompaction(compacted);
        const answer = await retry(await ctx.rebuild());
        if (answer) return answer;
      }

      const lastResort = await this.summarizeBeforeTurn(ctx).catch(() => undefined);
      if (lastResort) {
        const answer = await retry(lastResort);
        if (answer) return answer;
      }
      throw new CairnError(
        'CONTEXT_OVERFLOW',
        "The conversation does not fit in the model's context window even after compaction. Reset the session, or shorten the last message.",
      );
    };
    return { model: model.model, contextWindow: model.contextWindow, complete };
  }

  /** `compactMessages` over the summary and everything before the running turn; the turn stays raw. */
  private async summarizeBeforeTurn(ctx: GuardedTurn): Promise<ChatMessage[] | undefined> {
    const history = await ctx.historyBeforeTurn();
    if (history.messages.length === 0 && !history.summary) return undefined;
    const summary = await this.deps.compaction.compactMessages(
      ctx.session.id,
      ctx.agent.name,
      history.messages,
      history.summary,
    );
    return ctx.rebuildWithSummary(summary);
  }

  /** Suspends automatic compaction for the session: the turn's write, through its port. */
  private async suspend(ctx: GuardedTurn, session: SessionRow, reason: string): Promise<void> {
    await ctx.writes.suspendCompaction();
    await ctx.writes.emit('context.compactionSuspended', session.id, { reason });
  }
}
