/**
 * What a principal may reach: its own sessions and tasks (the admin: all),
 * and its key's agents. Anything else is answered exactly as if it did not
 * exist (404), so a key learns nothing of another key's objects.
 */
import { CairnError } from '../errors.js';
import { requireSession, sessionNotFound } from '../store/session-not-found.js';
import type { SessionRow, SessionStore, TaskRow, TaskStore } from '../store/store.js';
import { mayUseAgent, owns, type Principal } from './principal.js';

export function agentNotFound(name: string): CairnError {
  return new CairnError(
    'AGENT_NOT_FOUND',
    `Agent "${name}" not found. Add agents/${name}/agent.json or check GET /agents.`,
  );
}

export function taskNotFound(id: string): CairnError {
  return new CairnError('TASK_NOT_FOUND', `Task "${id}" not found. List tasks with GET /tasks.`);
}

export class Access {
  constructor(
    private readonly store: Pick<SessionStore, 'findSession'> & Pick<TaskStore, 'findTask'>,
  ) {}

  /** The session, if `principal` may see it; else SESSION_NOT_FOUND. */
  async session(principal: Principal, id: string): Promise<SessionRow> {
    const session = requireSession(await this.store.findSession(id), id);
    if (!owns(principal, session.owner_key)) throw sessionNotFound(id);
    return session;
  }

  /** The task, if `principal` may see it; else TASK_NOT_FOUND. */
  async task(principal: Principal, id: string): Promise<TaskRow> {
    const task = await this.store.findTask(id);
    if (!task || !owns(principal, task.owner_key)) throw taskNotFound(id);
    return task;
  }

  /** AGENT_NOT_FOUND unless `principal` may use the agent `name`. */
  agent(principal: Principal, name: string): void {
    if (!mayUseAgent(principal, name)) throw agentNotFound(name);
  }
}
