/**
 * Sessions' lifecycle: create, fork, read, reset, close, delete, and the
 * checks a request passes before it queues for a turn. Running turns is the
 * turn engine's; what must not interleave with one (a reset, a close, a
 * delete) runs in the session's slot, which only the engine holds.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import { CairnError } from '../errors.js';
import type { Owner, SessionMode, SessionRow, SessionStore, TaskStore } from '../store/store.js';
import { requireSession, sessionNotFound } from '../store/session-not-found.js';
import type { EventBus } from './event-bus.js';
import { refuseIfTaskWaiting, requireUsable } from './session-rules.js';
import type { TurnEngine } from './turn-engine.js';

export interface CreateSessionInput {
  agentName: string;
  mode?: SessionMode;
  title?: string | null;
  /** The percent of the raw tail a compaction covers (the API's `compactCount`). */
  compactCount?: number;
  parentSessionId?: string | null;
  /** Who the session belongs to (default: the admin; a subagent's: its parent's owner). */
  owner?: Owner;
  /** Where its visible-transcript chain starts (see `NewSession.transcriptSeed`). */
  transcriptSeed?: string | null;
}

/** Who asked for an action, as its audit event records it (`by: {key, user}`). */
export type ActedBy = Owner;

export interface SessionsDeps {
  store: Pick<
    SessionStore,
    | 'createSession'
    | 'findSession'
    | 'forkSession'
    | 'resetSession'
    | 'closeSession'
    | 'deleteSession'
  > &
    Pick<TaskStore, 'findWaitingTaskForSession' | 'transitionTask'>;
  agents: Pick<AgentRegistry, 'get'>;
  events: Pick<EventBus, 'emit'>;
  /** The session slots (the turn engine's): resets, closes and deletes wait for running turns. */
  slots: Pick<TurnEngine, 'exclusive'>;
}

export class Sessions {
  constructor(private readonly deps: SessionsDeps) {}

  async create(input: CreateSessionInput): Promise<SessionRow> {
    const { store, events } = this.deps;
    const agent = this.deps.agents.get(input.agentName);
    const parent =
      input.parentSessionId == null ? undefined : await store.findSession(input.parentSessionId);
    // A subagent works for whoever its parent session belongs to.
    const owner = input.owner ?? (parent && { key: parent.owner_key, user: parent.end_user });
    const session = await store.createSession({
      agentName: agent.name,
      mode: input.mode ?? 'chat',
      title: input.title ?? null,
      parentSessionId: input.parentSessionId ?? null,
      compactCount: input.compactCount ?? agent.defaultCompaction.compactCount,
      systemPrompt: agent.system,
      ...(owner ? { owner } : {}),
      ...(input.transcriptSeed != null ? { transcriptSeed: input.transcriptSeed } : {}),
    });
    await events.emit('session.created', session.id, {
      agentName: agent.name,
      mode: session.mode,
      parentSessionId: session.parent_session_id,
      ownerKey: session.owner_key,
      endUser: session.end_user,
    });
    return session;
  }

  /**
   * A new chat session holding `id`'s history up to `atSeq` (default: all of
   * it), compaction state included where `atSeq` is past the pointer. It does
   * not wait for a running turn: it copies what is committed up to `atSeq`.
   */
  async fork(id: string, atSeq?: number): Promise<SessionRow> {
    const outcome = await this.deps.store.forkSession(id, atSeq);
    if (outcome.kind === 'no-session') throw sessionNotFound(id);
    if (outcome.kind === 'no-message')
      throw new CairnError(
        'MESSAGE_NOT_FOUND',
        `Session "${id}" has no message with seq ${atSeq ?? '(none)'}. Fork at the seq of one of its messages (GET /sessions/${id}/messages), or omit atSeq to fork all of it.`,
      );
    const fork = outcome.session;
    await this.deps.events.emit('session.created', fork.id, {
      agentName: fork.agent_name,
      mode: fork.mode,
      parentSessionId: null,
      forkedFrom: { sessionId: id, atSeq: fork.last_seq },
    });
    return fork;
  }

  /** The session, or 404 `SESSION_NOT_FOUND`. */
  async get(id: string): Promise<SessionRow> {
    return requireSession(await this.deps.store.findSession(id), id);
  }

  /** The session, checked to belong to `agent` and to be open. */
  async usable(id: string, agent: Pick<AgentConfig, 'name'>): Promise<SessionRow> {
    return requireUsable(await this.deps.store.findSession(id), id, agent);
  }

  /** 409 `TASK_WAITING` when a task on the session waits for an answer or an approval. */
  async rejectIfTaskWaiting(sessionId: string): Promise<void> {
    refuseIfTaskWaiting(await this.deps.store.findWaitingTaskForSession(sessionId));
  }

  /** Waits for the session's running turns, then clears its conversation and compaction state. */
  async reset(id: string, by?: ActedBy): Promise<SessionRow> {
    const { store, events } = this.deps;
    return this.inSlot(id, async (slot) => {
      // A task waiting on this session waits on a call that reset deletes.
      const waiting = await store.findWaitingTaskForSession(id);
      if (waiting) {
        slot.throwIfAborted();
        await store.transitionTask(waiting.id, ['waiting'], {
          status: 'cancelled',
          error: 'Cancelled: the session was reset.',
          pending_call_id: null,
          pending_tool: null,
          pending_arguments: null,
        });
        await events.emit('task.cancelled', id, { taskId: waiting.id, reason: 'session reset' });
      }
      slot.throwIfAborted();
      const session = requireSession(await store.resetSession(id), id);
      await events.emit('session.reset', id, by ? { by } : {});
      return session;
    });
  }

  async close(id: string): Promise<SessionRow> {
    return this.inSlot(id, async (slot) => {
      slot.throwIfAborted();
      const session = requireSession(await this.deps.store.closeSession(id), id);
      await this.deps.events.emit('session.closed', id, {});
      return session;
    });
  }

  async delete(id: string, by?: ActedBy): Promise<void> {
    await this.inSlot(id, async (slot) => {
      slot.throwIfAborted();
      await this.deps.store.deleteSession(id);
      await this.deps.events.emit('session.deleted', id, by ? { by } : {});
    });
  }

  /** Runs `work` in the slot of an existing session (404 at once, without queueing). */
  private async inSlot<T>(id: string, work: (slot: AbortSignal) => Promise<T>): Promise<T> {
    await this.get(id);
    return this.deps.slots.exclusive(id, work);
  }
}
