/**
 * An agent's budgets over one turn (`limits` in agent.json): tokens per turn,
 * tokens per session, tool calls per turn. Pure bookkeeping: the loop asks
 * before each model call and each tool call, and a limit that is reached
 * stops the turn with BUDGET_EXCEEDED, naming the limit and how to raise it.
 * Compaction tokens count: the automatic compactions of the turn and every
 * compaction the session ran before it.
 */
import type { AgentLimits } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import type { TokenUsage } from '../llm/messages.js';
import type { SessionRow } from '../store/store.js';

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
}

export class TurnBudget {
  private toolCalls = 0;

  constructor(private readonly options: TurnBudgetOptions) {}

  /** True when the agent has no limit this budget checks. */
  get unlimited(): boolean {
    const { maxTurnTokens, maxSessionTokens, maxToolCalls } = this.options.limits;
    return (
      maxTurnTokens === undefined && maxSessionTokens === undefined && maxToolCalls === undefined
    );
  }

  /** Throws BUDGET_EXCEEDED when the turn, or the session, has no tokens left for another call. */
  beforeModelCall(turnUsage: TokenUsage): void {
    const { limits, agentName } = this.options;
    const turn = turnUsage.input_tokens + turnUsage.output_tokens + this.options.compactionTokens();
    if (limits.maxTurnTokens !== undefined && turn >= limits.maxTurnTokens)
      throw exceeded(
        `This turn used ${turn} tokens and reached the agent's limit limits.maxTurnTokens (${limits.maxTurnTokens}); it stopped before another model call. What it did so far is kept. To let turns run longer, raise limits.maxTurnTokens in agents/${agentName}/agent.json.`,
      );
    const session = this.options.sessionTokensBefore + turn;
    if (limits.maxSessionTokens !== undefined && session >= limits.maxSessionTokens)
      throw exceeded(
        `This session used ${session} tokens and reached the agent's limit limits.maxSessionTokens (${limits.maxSessionTokens}). What it did so far is kept. Reset the session (POST /sessions/:id/reset) or start a new one, or raise limits.maxSessionTokens in agents/${agentName}/agent.json.`,
      );
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

function exceeded(message: string): CairnError {
  return new CairnError('BUDGET_EXCEEDED', message);
}
