/**
 * The start-up check that goes beyond agent.json itself: every tool an agent
 * lists must resolve (built-in name known, module present, inside the folder,
 * with the right exports). Run by the server at start-up, on each reload and by
 * `cairn agents validate`, so they never disagree. It checks the tool lists of
 * rejected files too (as far as they could be read), so a typo in a field
 * never hides a typo in a tool name until the first is fixed.
 */
import { describeError } from '../errors.js';
import type { AgentConfig, AgentProblem, AgentToolList } from './agent-config.js';

/** Resolves one agent's tools, throwing what is wrong (ToolCatalog.forAgent). */
export type ResolveTools = (agent: AgentConfig) => Promise<unknown>;

/**
 * The problems of each tool list that does not resolve: one per entry that
 * fails on its own, at that entry; or, when no single entry fails (the list as
 * a whole is refused), one at the list.
 */
export async function checkAgentTools(
  toolLists: readonly AgentToolList[],
  resolveTools: ResolveTools,
): Promise<AgentProblem[]> {
  const problems: AgentProblem[] = [];
  for (const { file, agent, entries, list } of toolLists) {
    let whole: unknown;
    try {
      await resolveTools(agent);
      continue;
    } catch (err) {
      whole = err;
    }
    const found: AgentProblem[] = [];
    for (const [i, spec] of agent.tools.entries()) {
      try {
        await resolveTools({ ...agent, tools: [spec] });
      } catch (err) {
        found.push({ file, ...(entries[i] ?? list), rule: 'tool', message: describeError(err) });
      }
    }
    problems.push(
      ...(found.length > 0
        ? found
        : [{ file, ...list, rule: 'tool', message: describeError(whole) }]),
    );
  }
  return problems;
}
