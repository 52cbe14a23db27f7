/**
 * What an A2A request may see: the one place the A2A routes ask. The bearer
 * check itself is the server's (src/http/auth.ts) and runs before any A2A
 * route; here the request's principal decides. The admin sees every agent,
 * task and context; a client key sees its key's agents and only the tasks
 * and contexts it started. Anything else is answered as "not found".
 */
import type { FastifyRequest } from 'fastify';
import type { AgentConfig } from '../agents/agent-config.js';
import type { Owner, SessionRow, TaskRow } from '../store/store.js';
import { mayUseAgent, ownerOf, owns, principalOf } from '../http/principal.js';

export interface A2AAccess {
  /** May the caller discover and talk to this agent? */
  mayUseAgent(agent: AgentConfig): boolean;
  /** May the caller see (and continue, cancel, follow) this task? */
  maySeeTask(task: TaskRow): boolean;
  /** May the caller start a task in this session (an A2A context)? */
  maySeeSession(session: SessionRow): boolean;
  /** Who owns what the caller starts, and who decides an approval it answers. */
  readonly owner: Owner;
  /** The client key whose tasks a listing is limited to; undefined for the admin. */
  readonly ownerKey: string | undefined;
}

/** The access of the principal behind `request`. */
export function accessFor(request: FastifyRequest): A2AAccess {
  const principal = principalOf(request);
  return {
    mayUseAgent: (agent) => mayUseAgent(principal, agent.name),
    maySeeTask: (task) => owns(principal, task.owner_key),
    maySeeSession: (session) => owns(principal, session.owner_key),
    owner: ownerOf(principal),
    ownerKey: principal.kind === 'client' ? principal.key.id : undefined,
  };
}
