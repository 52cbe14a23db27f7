/**
 * The start-up check that goes beyond agent.json itself: every tool an agent
 * lists must resolve (built-in name known, module present, inside the folder,
 * with the right exports). Run by the server at start-up and by
 * `cairn agents validate`, so the two never disagree.
 */
import path from 'node:path';
import { describeError } from '../errors.js';
import type { AgentConfig, AgentProblem } from './agent-config.js';

/** Resolves one agent's tools, throwing what is wrong (ToolCatalog.forAgent). */
export type ResolveTools = (agent: AgentConfig) => Promise<unknown>;

/** One problem per agent whose tools do not resolve, in the agents' order. */
export async function checkAgentTools(
  agents: readonly AgentConfig[],
  resolveTools: ResolveTools,
): Promise<AgentProblem[]> {
  const problems: AgentProblem[] = [];
  for (const agent of agents) {
    try {
      await resolveTools(agent);
    } catch (err) {
      problems.push({
        file: path.join(agent.dir, 'agent.json'),
        pointer: '/tools',
        rule: 'tool',
        message: describeError(err),
      });
    }
  }
  return problems;
}
