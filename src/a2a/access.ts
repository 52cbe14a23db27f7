/**
 * What an A2A request may see: the one place the A2A routes ask. The bearer
 * check itself is the server's (src/http/auth.ts) and runs before any A2A
 * route; by the time a request gets here it holds the API key, or no key is
 * configured. Either way it acts for everyone, so today every agent, task
 * and session is visible. When keys start to own sessions and tasks, this is
 * where a task or context that is not the caller's becomes "not found".
 */
import type { FastifyRequest } from 'fastify';
import type { AgentConfig } from '../agents/agent-config.js';
import type { SessionRow, TaskRow } from '../store/store.js';

export interface A2AAccess {
  /** May the caller discover and talk to this agent? */
  mayUseAgent(agent: AgentConfig): boolean;
  /** May the caller see (and continue, cancel, follow) this task? */
  maySeeTask(task: TaskRow): boolean;
  /** May the caller start a task in this session (an A2A context)? */
  maySeeSession(session: SessionRow): boolean;
}

const EVERYTHING: A2AAccess = {
  mayUseAgent: () => true,
  maySeeTask: () => true,
  maySeeSession: () => true,
};

/** The access of the principal behind `request`. */
export function accessFor(_request: FastifyRequest): A2AAccess {
  return EVERYTHING;
}
