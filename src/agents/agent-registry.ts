/**
 * The loaded agents, looked up by name. Names from URLs and tool calls are
 * checked against the name pattern first, so a hostile name is simply "not found".
 */
import path from 'node:path';
import { CairnError } from '../errors.js';
import { AGENT_NAME_PATTERN, type AgentConfig, type AgentProblem } from './agent-config.js';

export class AgentRegistry {
  private byName = new Map<string, AgentConfig>();
  private sorted: readonly AgentConfig[] = [];
  /** The first problem of each agent folder that failed to load, by folder name. */
  private invalid = new Map<string, AgentProblem>();

  /** `problems`: what loading reported, so a lookup of a broken agent can say why it is missing. */
  constructor(agents: readonly AgentConfig[], problems: readonly AgentProblem[] = []) {
    this.replace(agents, problems);
  }

  /**
   * Swaps in a freshly loaded set (live reload). Lookups from now on see the
   * new configs; a turn that already holds a config keeps that version.
   */
  replace(agents: readonly AgentConfig[], problems: readonly AgentProblem[] = []): void {
    const byName = new Map<string, AgentConfig>();
    const invalid = new Map<string, AgentProblem>();
    for (const problem of problems) {
      const folder = path.basename(path.dirname(problem.file));
      if (!invalid.has(folder)) invalid.set(folder, problem);
    }
    for (const agent of agents) {
      if (byName.has(agent.name))
        throw new CairnError('INTERNAL', `Agent "${agent.name}" is defined twice.`);
      byName.set(agent.name, agent);
    }
    this.byName = byName;
    this.invalid = invalid;
    this.sorted = Object.freeze(
      [...agents].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)),
    );
  }

  /** Every agent, sorted by name. */
  list(): readonly AgentConfig[] {
    return this.sorted;
  }

  /** The agent called `name`, or undefined (also for any name that is not a valid agent name). */
  find(name: string): AgentConfig | undefined {
    if (typeof name !== 'string' || !AGENT_NAME_PATTERN.test(name)) return undefined;
    return this.byName.get(name);
  }

  /** The agent called `name`; throws AGENT_NOT_FOUND (404) otherwise. */
  get(name: string): AgentConfig {
    const agent = this.find(name);
    if (agent === undefined) {
      const problem = AGENT_NAME_PATTERN.test(name) ? this.invalid.get(name) : undefined;
      if (problem !== undefined) {
        const at =
          problem.line !== undefined
            ? `, at line ${problem.line}, column ${problem.column ?? 1}`
            : '';
        throw new CairnError(
          'AGENT_NOT_FOUND',
          `Agent "${name}" is not loaded: agents/${name}/agent.json is invalid. First problem${at}: ${problem.pointer ? `${problem.pointer} ` : ''}${problem.message} (${problem.rule}). Fix the file: the server reloads it by itself when it changes (or on POST /agents/reload); \`cairn agents validate\` lists every problem.`,
        );
      }
      throw new CairnError(
        'AGENT_NOT_FOUND',
        `Agent "${name}" not found. Add agents/${name}/agent.json or check GET /agents.`,
      );
    }
    return agent;
  }
}
