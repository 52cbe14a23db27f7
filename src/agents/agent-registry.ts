/**
 * The loaded agents, looked up by name. Names from URLs and tool calls are
 * checked against the name pattern first, so a hostile name is simply "not found".
 */
import { CairnError } from '../errors.js';
import { AGENT_NAME_PATTERN, type AgentConfig } from './agent-config.js';

export class AgentRegistry {
  private readonly byName = new Map<string, AgentConfig>();
  private readonly sorted: readonly AgentConfig[];

  constructor(agents: readonly AgentConfig[]) {
    for (const agent of agents) {
      if (this.byName.has(agent.name))
        throw new CairnError('INTERNAL', `Agent "${agent.name}" is defined twice.`);
      this.byName.set(agent.name, agent);
    }
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
      throw new CairnError(
        'AGENT_NOT_FOUND',
        `Agent "${name}" not found. Add agents/${name}/agent.json or check GET /agents.`,
      );
    }
    return agent;
  }
}
