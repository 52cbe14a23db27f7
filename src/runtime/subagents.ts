/**
 * Subagents: `agent:<name>` in an agent's tools gives the model a tool
 * `agent_<name> {input}` that runs that agent in a fresh child session
 * (mode `subagent`, `parent_session_id` = the caller's) and returns its final
 * answer. Depth and cycles are checked before anything is spawned.
 */
import { approvalInSubagentResult } from './approvals.js';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import type { RunBudget, Tool } from '../tools/tool.js';
import type { Sessions } from './sessions.js';
import { SUBAGENTS_PER_RUN } from './tool-context.js';
import type { TurnEngine } from './turn-engine.js';
import { impossibleOutcome, throwIfStopped, unreachableOutcome } from './turn-outcome.js';

/** How many subagent levels may sit below a top-level session. */
export const SUBAGENT_MAX_DEPTH = 3;
/** A subagent runs a whole loop, so it gets far longer than an ordinary tool. */
export const SUBAGENT_TIMEOUT_MS = 10 * 60_000;

export interface SubagentInput {
  parentSessionId: string;
  agentName: string;
  input: string;
  depth: number;
  lineage: readonly string[];
  budget: RunBudget;
  signal?: AbortSignal;
}

export interface SubagentsDeps {
  sessions: Pick<Sessions, 'create' | 'close'>;
  engine: Pick<TurnEngine, 'withTurnSlot'>;
  agents: Pick<AgentRegistry, 'get' | 'find'>;
}

export class Subagents {
  constructor(private readonly deps: SubagentsDeps) {}

  /** A subagent call: always a fresh session, the caller's as parent; closed when it answers. */
  async runSubagent(input: SubagentInput): Promise<string> {
    const agent = this.deps.agents.get(input.agentName);
    const session = await this.deps.sessions.create({
      agentName: agent.name,
      mode: 'subagent',
      parentSessionId: input.parentSessionId,
    });
    try {
      const { outcome } = await this.deps.engine.withTurnSlot(
        session.id,
        agent,
        (_session, runTurn) =>
          runTurn({
            input: [{ role: 'user', content: input.input }],
            depth: input.depth,
            lineage: input.lineage,
            budget: input.budget,
            ...(input.signal ? { signal: input.signal } : {}),
          }),
      );
      // A limit or failure fails the caller's tool call, which the caller's model sees.
      throwIfStopped(outcome);
      switch (outcome.kind) {
        case 'reply':
        case 'client-tools':
          return outcome.reply;
        case 'question':
          return `The subagent "${agent.name}" needs more information before it can answer: ${outcome.question}`;
        case 'approval':
          return approvalInSubagentResult(agent.name, outcome.call);
        case 'held-question':
        case 'held-approval':
          // A subagent's turn holds nothing: nobody waits on it.
          return impossibleOutcome(outcome);
        default:
          return unreachableOutcome(outcome);
      }
    } finally {
      await this.deps.sessions.close(session.id);
    }
  }

  /** The tool `agent_<target>` that `caller` gets for `agent:<target>` in its tools. */
  tool(caller: AgentConfig, target: string): Tool {
    const description = this.deps.agents.find(target)?.description;
    return {
      name: `agent_${target}`,
      description: `Ask the agent "${target}" to do something and return its answer.${description ? ` It is: ${description}` : ''}`,
      parameters: {
        type: 'object',
        properties: {
          input: {
            type: 'string',
            minLength: 1,
            description: 'The complete request for the subagent.',
          },
        },
        required: ['input'],
        additionalProperties: false,
      },
      timeoutMs: SUBAGENT_TIMEOUT_MS,
      run: async (args, ctx) => {
        if (ctx.depth + 1 > SUBAGENT_MAX_DEPTH) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `subagent depth limit (${SUBAGENT_MAX_DEPTH}) reached; nothing was started.`,
          );
        }
        if (ctx.lineage.includes(target)) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `calling "${target}" would form a cycle (${[...ctx.lineage, target].join(' → ')}); nothing was started.`,
          );
        }
        if (ctx.budget.subagentsLeft <= 0) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `this run already started ${SUBAGENTS_PER_RUN} subagents, its limit; nothing was started. Answer with what you have.`,
          );
        }
        if (!this.deps.agents.find(target)) {
          throw new CairnError(
            'AGENT_NOT_FOUND',
            `agent "${target}" (listed by "${caller.name}") is not loaded.`,
          );
        }
        ctx.budget.subagentsLeft -= 1;
        return this.runSubagent({
          parentSessionId: ctx.sessionId,
          agentName: target,
          input: String(args.input),
          depth: ctx.depth + 1,
          lineage: ctx.lineage,
          budget: ctx.budget,
          signal: ctx.signal,
        });
      },
    };
  }
}
