/**
 * An agent's budgets over one turn (`limits` in agent.json): tokens per turn,
 * tokens per session, tool calls per turn. Pure bookkeeping: the loop asks
 * before each model call and each tool call. A model call is held against
 * the token limits before it is sent: its claim (prompt estimate plus
 * requested output, as the key's reservation counts it) added to what the
 * turn and the session already used must stay within them, or the turn stops
 * with BUDGET_EXCEEDED, naming the limit and how to raise it, and the
 * provider is sent nothing. The claim is held in memory, for this turn only:
 * the session lock runs one turn of a session at a time, and the loop one
 * call at a time, so nothing else spends the turn's or the session's tokens
 * meanwhile. Compaction tokens count: the automatic compactions of the turn
 * and every compaction the session ran before it.
 */
import type { AgentLimits } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import type { TokenUsage } from '../llm/messages.js';
import type { ModelRequest } from '../llm/model-client.js';
import type { SessionRow } from '../store/store.js';
import { claimedTokens } from './budget.js';

/** Every token a session's model calls and compactions used. */
export function sessionTokens(
  session: Pick<
    SessionRow,
    'input_tokens' | 'output_tokens' | 'compaction_input_tokens' | 'compaction_output_tokens'
  >,
): number {
  return (
    session.input_tokens +
    session.output_tokens +
    session.compaction_input_tokens +
    session.compaction_output_tokens
  );
}

export interface TurnBudgetOptions {
  agentName: string;
  limits: AgentLimits;
  /** The session's tokens when the turn began. */
  sessionTokensBefore: number;
  /** Tokens of the turn's automatic compactions so far. */
  compactionTokens: () => number;
  /** The output a call claims when it sets no maxTokens (0 where the provider is sent no maximum). */
  outputTokens?: number;
}

export class TurnBudget {
  private toolCalls = 0;
  /** The loop's running total of the turn's calls (the object it adds each call's usage to). */
  private turnUsage: TokenUsage = { input_tokens: 0, output_tokens: 0 };

  constructor(private readonly options: TurnBudgetOptions) {}

  /** True when the agent has no limit this budget checks. */
  get unlimited(): boolean {
    const { maxTurnTokens, maxSessionTokens, maxToolCalls } = this.options.limits;
    return (
      maxTurnTokens === undefined && maxSessionTokens === undefined && maxToolCalls === undefined
    );
  }

  /**
   * Throws BUDGET_EXCEEDED when `request`'s claim, added to what the turn
   * (`turnUsage` and its compactions) or the session used, would go past the
   * agent's limit: the call must not be sent.
   */
  beforeModelCall(turnUsage: TokenUsage, request: ModelRequest): void {
    const { limits, agentName } = this.options;
    this.turnUsage = turnUsage;
    const turn = this.turnTokens();
    const needed = claimedTokens(request, this.options.outputTokens ?? 0);
    if (limits.maxTurnTokens !== undefined && turn + needed > limits.maxTurnTokens)
      throw exceeded(
        `This turn used ${turn} tokens and its next model call needs ${needed} (prompt estimate plus requested output), past the agent's limit limits.maxTurnTokens (${limits.maxTurnTokens}); it stopped before sending that call. What it did so far is kept. To let turns run longer, raise limits.maxTurnTokens in agents/${agentName}/agent.json.`,
      );
    holdSessionTokens(agentName, limits, this.options.sessionTokensBefore + turn, needed);
  }

  /**
   * Throws BUDGET_EXCEEDED when the summary an automatic compaction of this
   * turn is about to ask for, claiming `claim` tokens, would take the turn
   * past maxTurnTokens: its tokens count toward the turn's. (The session's
   * limit is held by the compaction itself, from the row it read.)
   */
  beforeSummary(claim: number): void {
    const { limits, agentName } = this.options;
    const turn = this.turnTokens();
    if (limits.maxTurnTokens === undefined || turn + claim <= limits.maxTurnTokens) return;
    throw exceeded(
      `This turn used ${turn} tokens and the summary of its automatic compaction needs ${claim} (prompt estimate plus requested output), past the agent's limit limits.maxTurnTokens (${limits.maxTurnTokens}); the summary was not asked for. To let turns run longer, raise limits.maxTurnTokens in agents/${agentName}/agent.json.`,
    );
  }

  /**
   * Throws BUDGET_EXCEEDED when the retry of a call the provider refused as
   * too long (re-sent after a compaction) would go past a token limit: the
   * compaction's tokens now count, so the first call's hold no longer covers it.
   */
  beforeRetry(request: ModelRequest): void {
    this.beforeModelCall(this.turnUsage, request);
  }

  private turnTokens(): number {
    const { input_tokens, output_tokens } = this.turnUsage;
    return input_tokens + output_tokens + this.options.compactionTokens();
  }

  /** Counts one tool call; false when the turn has none left (the call must not run). */
  takeToolCall(): boolean {
    const max = this.options.limits.maxToolCalls;
    if (max !== undefined && this.toolCalls >= max) return false;
    this.toolCalls += 1;
    return true;
  }

  /** The error for a turn whose tool calls ran out. */
  toolCallsExceeded(): CairnError {
    const { limits, agentName } = this.options;
    return exceeded(
      `This turn ran ${this.toolCalls} tool calls and reached the agent's limit limits.maxToolCalls (${limits.maxToolCalls ?? 0}); the calls past it were not run. What it did so far is kept. To allow more, raise limits.maxToolCalls in agents/${agentName}/agent.json.`,
    );
  }
}

/**
 * Throws BUDGET_EXCEEDED when a call needing `needed` tokens, on a session
 * that used `used`, would go past the agent's limits.maxSessionTokens: for
 * turn calls and compaction summaries alike.
 */
export function holdSessionTokens(
  agentName: string,
  limits: Pick<AgentLimits, 'maxSessionTokens'>,
  used: number,
  needed: number,
): void {
  if (limits.maxSessionTokens === undefined || used + needed <= limits.maxSessionTokens) return;
  throw exceeded(
    `This session used ${used} tokens and its next model call needs ${needed} (prompt estimate plus requested output), past the agent's limit limits.maxSessionTokens (${limits.maxSessionTokens}); it stopped before sending that call. What it did so far is kept. Reset the session (POST /sessions/:id/reset) or start a new one, or raise limits.maxSessionTokens in agents/${agentName}/agent.json.`,
  );
}

function exceeded(message: string): CairnError {
  return new CairnError('BUDGET_EXCEEDED', message);
}
