/**
 * Tasks: a loop run with a goal, tracked in `tasks`. A task runs in the
 * background in its session's slot; it stops in `waiting` when the agent calls
 * `ask_user` and continues when `resumeTask` supplies the answer as that call's
 * result, or when a call needs a person's approval and continues on
 * `decideApproval` (approve or deny). The task row is the source of truth, so a waiting
 * task survives a restart, and a task that was running when the server died is
 * `interrupted` and resumable.
 */
import { CairnError, describeError } from '../errors.js';
import type { ChatMessage } from '../llm/messages.js';
import type { AgentConfig } from '../agents/agent-config.js';
import type { AgentRegistry } from '../agents/agent-registry.js';
import type { Owner, SessionRow, TaskPatch, TaskRow, TaskStore } from '../store/store.js';
import { CANCELLED_TOOL_RESULT } from './loop.js';
import {
  announceApprovalWait,
  deniedResult,
  pendingApprovalCall,
  recordApprovalWait,
} from './approvals.js';
import { APPROVAL_TIMED_OUT_RESULT, type ApprovalTimer } from './approval-timeouts.js';
import type { EventBus } from './event-bus.js';
import type { Sessions } from './sessions.js';
import type { RunTurn, TurnEngine, TurnResult } from './turn-engine.js';
import type { TurnWrites } from './turn-writes.js';
import {
  impossibleOutcome,
  outcomeOfError,
  stopError,
  unreachableOutcome,
  type TurnOutcome,
} from './turn-outcome.js';
import { KeyedQueue } from './keyed-queue.js';
import { isOutage } from './outage-report.js';
import { resumeAfterInterruption } from './interruption.js';

export interface RunTaskInput {
  agentName: string;
  input: string;
  sessionId?: string;
  /** Session mode for a new session (daemon ticks use `daemon`). */
  mode?: 'task' | 'daemon';
  /** The owner of a new session (default: the admin). */
  owner?: Owner;
}

/** A person's (or a timeout's) decision on a task waiting for approval. */
export interface ApprovalDecision {
  taskId: string;
  decision: 'approve' | 'deny';
  reason?: string;
  /** Set when the denial is the tool's approvalTimeout running out. */
  timedOut?: boolean;
  /** Who decided: stored on the task (`decided_by`) and in the event (default: the admin). */
  by?: Owner;
}

interface Running {
  controller: AbortController;
  done: Promise<void>;
}

export interface TaskRunnerDeps {
  sessions: Pick<Sessions, 'create' | 'usable' | 'rejectIfTaskWaiting'>;
  /** A task's turn runs in its session's slot; a cancel answers an open call in the slot too. */
  engine: Pick<TurnEngine, 'withTurnSlot' | 'exclusive' | 'runApprovedCall'>;
  agents: Pick<AgentRegistry, 'get'>;
  /** Tasks outside their slot (created, resumed, settled late); what the slot writes goes through its port. */
  store: TaskStore;
  events: EventBus;
  /** Where unexpected task failures are reported. */
  log?: (details: Record<string, unknown>, message: string) => void;
  /** Arms the deadline of a wait for approval of a tool with an approvalTimeout. */
  approvalTimer?: ApprovalTimer;
}

/** Where a settlement's status write goes: the slot's port, or the store once the slot is gone. */
type TaskStatusWrites = Pick<TaskStore, 'transitionTask'>;

/**
 * How a task's run is settled: the write of its status (a compare-and-set
 * from `running`, made in the session's slot through its port, or late
 * through the store when that failed) and the event that announces it once
 * it landed.
 */
interface Settlement {
  readonly record: (writes: TaskStatusWrites) => Promise<TaskRow | undefined>;
  readonly announce: (row: TaskRow) => Promise<void>;
}

/** How many times a cancel aborts a run that keeps settling as `waiting` before it gives up. */
const CANCEL_ROUNDS = 3;
/** Backoff between attempts of a task's final status write while the database is away (ms). */
const SETTLE_RETRY_MS = { first: 200, max: 5_000 };

export class TaskRunner {
  private readonly running = new Map<string, Running>();
  /** Per-task lock for resume and cancel (a FIFO keyed by task id). */
  private readonly control = new KeyedQueue();
  /** Set by `drain()`: a final status write that keeps failing is left to the next start's recovery. */
  private shuttingDown = false;

  constructor(private readonly deps: TaskRunnerDeps) {}

  /** Starts a task; resolves once its row exists (the loop runs in the background). */
  async runTask(input: RunTaskInput): Promise<TaskRow> {
    const { sessions, store, events } = this.deps;
    const agent = this.deps.agents.get(input.agentName);
    const session = input.sessionId
      ? await sessions.usable(input.sessionId, agent)
      : await sessions.create({
          agentName: agent.name,
          mode: input.mode ?? 'task',
          ...(input.owner ? { owner: input.owner } : {}),
        });
    await sessions.rejectIfTaskWaiting(session.id);
    const task = await store.createTask({
      sessionId: session.id,
      agentName: agent.name,
      input: input.input,
    });
    // Registered before any await, so a cancel from now on finds the run.
    this.start(task, agent, async (signal, current, runTurn) => {
      // Cancelled while queued: stop before the input is stored.
      signal.throwIfAborted();
      // A task queued behind another may find the session waiting by then.
      await sessions.rejectIfTaskWaiting(current.id);
      return runTurn({ input: [{ role: 'user', content: input.input }], signal });
    });
    await events.emit('task.started', session.id, {
      taskId: task.id,
      agentName: agent.name,
    });
    return task;
  }

  /**
   * Continues a `waiting` task with the user's answer (or an `interrupted` one,
   * optionally with a message). Exactly one of two concurrent resumes wins.
   */
  async resumeTask(input: { taskId: string; answer?: string }): Promise<TaskRow> {
    // Under the task's control lock, so a cancel never sees the row `running`
    // before the run is registered (it would find nothing to abort).
    return this.control.run(input.taskId, () => this.resumeLocked(input));
  }

  private async resumeLocked(input: { taskId: string; answer?: string }): Promise<TaskRow> {
    const { store, events } = this.deps;
    const before = await this.getTask(input.taskId);
    if (before.status !== 'waiting' && before.status !== 'interrupted') {
      throw new CairnError(
        'TASK_NOT_WAITING',
        `Task "${before.id}" is ${before.status}; only waiting or interrupted tasks can be resumed.`,
      );
    }
    if (before.status === 'waiting' && (input.answer === undefined || input.answer.trim() === '')) {
      throw new CairnError(
        'VALIDATION_ERROR',
        `Task "${before.id}" is waiting for an answer to: ${before.question ?? ''} Send {"answer": "…"}.`,
      );
    }
    if (pendingApprovalCall(before)) {
      throw new CairnError(
        'TASK_NOT_WAITING',
        `Task "${before.id}" is waiting for approval of a tool call, not for an answer. Use POST /tasks/${before.id}/approve or POST /tasks/${before.id}/deny.`,
      );
    }
    const agent = this.deps.agents.get(before.agent_name);
    // The compare-and-set on the status makes concurrent resumes safe.
    const task = await store.transitionTask(before.id, [before.status], {
      status: 'running',
      question: null,
      error: null,
      pending_call_id: null,
    });
    if (!task) {
      throw new CairnError(
        'TASK_NOT_WAITING',
        `Task "${before.id}" was resumed or cancelled by another request.`,
      );
    }
    const pendingCallId = before.status === 'waiting' ? before.pending_call_id : null;
    const message: ChatMessage =
      pendingCallId !== null
        ? {
            role: 'tool',
            tool_call_id: pendingCallId,
            name: 'ask_user',
            content: input.answer ?? '',
          }
        : {
            role: 'user',
            content: input.answer?.trim() ? input.answer : resumeAfterInterruption(before.error),
          };
    this.start(task, agent, (signal, _session, runTurn) =>
      runTurn({
        input: [message],
        signal,
        ...(pendingCallId !== null ? { pendingCallIds: new Set([pendingCallId]) } : {}),
      }),
    );
    await events.emit('task.resumed', task.session_id, { taskId: task.id });
    return task;
  }

  /**
   * Continues a task waiting for approval: `approve` runs the pending call,
   * then the loop goes on with its result; `deny` gives the call a result
   * saying a person refused it (with their reason), and the loop goes on.
   * 409 TASK_NOT_WAITING unless the task waits for approval; exactly one of
   * two concurrent decisions wins.
   */
  async decideApproval(input: ApprovalDecision): Promise<TaskRow> {
    return this.control.run(input.taskId, () => this.decideLocked(input));
  }

  private async decideLocked(input: ApprovalDecision): Promise<TaskRow> {
    const { engine, store, events } = this.deps;
    const before = await this.getTask(input.taskId);
    const call = pendingApprovalCall(before);
    if (!call) {
      throw new CairnError(
        'TASK_NOT_WAITING',
        `Task "${before.id}" is ${before.status} and not waiting for approval of a tool call; there is nothing to ${input.decision}.`,
      );
    }
    const agent = this.deps.agents.get(before.agent_name);
    const by: Owner = input.by ?? { key: null, user: null };
    const task = await store.transitionTask(before.id, ['waiting'], {
      status: 'running',
      question: null,
      error: null,
      pending_call_id: null,
      pending_tool: null,
      pending_arguments: null,
      approval_expires_at: null,
      decided_by: JSON.stringify(by),
    });
    if (!task) {
      throw new CairnError(
        'TASK_NOT_WAITING',
        `Task "${before.id}" was approved, denied or cancelled by another request.`,
      );
    }
    this.start(task, agent, async (signal, session, runTurn, writes) => {
      const result =
        input.decision === 'approve'
          ? await engine.runApprovedCall({ session, agent, call, signal, writes })
          : {
              role: 'tool' as const,
              tool_call_id: call.id,
              name: call.function.name,
              content:
                input.timedOut === true ? APPROVAL_TIMED_OUT_RESULT : deniedResult(input.reason),
            };
      return runTurn({ input: [result], signal, pendingCallIds: new Set([call.id]) });
    });
    await events.emit(
      input.decision === 'approve' ? 'task.approved' : 'task.denied',
      task.session_id,
      {
        taskId: task.id,
        tool: call.function.name,
        by,
        ...(input.timedOut === true ? { timedOut: true } : {}),
      },
    );
    return task;
  }

  /** Cancels a running, waiting or interrupted task; a finished task is returned unchanged. */
  async cancelTask(taskId: string): Promise<TaskRow> {
    // A run that is aborted may still settle as `waiting` (it had just asked
    // the user): look again once it has stopped. Bounded: only a resume can
    // start a new run, and each round aborts it.
    for (let round = 0; round < CANCEL_ROUNDS; round++) {
      const step = await this.control.run(taskId, () => this.cancelLocked(taskId));
      if ('task' in step) return step.task;
      await step.stopped;
    }
    return this.getTask(taskId);
  }

  private async cancelLocked(
    taskId: string,
  ): Promise<{ task: TaskRow } | { stopped: Promise<void> }> {
    const { events, engine } = this.deps;
    const task = await this.getTask(taskId);
    const running = this.running.get(task.id);
    if (running) {
      running.controller.abort(new CairnError('INTERNAL', 'cancelled'));
      return { stopped: running.done };
    }
    if (task.status !== 'waiting' && task.status !== 'interrupted') return { task };
    // In the session's slot, so no turn builds its context between the
    // status change and the answer to the open call.
    const cancelled = await engine.exclusive(task.session_id, async (_slot, writes) => {
      const row = await writes.transitionTask(task.id, [task.status], {
        status: 'cancelled',
        error: 'Cancelled by request.',
        pending_call_id: null,
        pending_tool: null,
        pending_arguments: null,
      });
      if (row && task.pending_call_id) {
        // Answer the open call (ask_user, or one awaiting approval) so the
        // session's history stays valid; announced like any stored message.
        const answered = await writes.appendMessages([
          {
            role: 'tool',
            tool_call_id: task.pending_call_id,
            name: task.pending_tool ?? 'ask_user',
            content: CANCELLED_TOOL_RESULT,
          },
        ]);
        events.publish(answered.events);
      }
      return row;
    });
    if (!cancelled) return { task: await this.getTask(task.id) };
    await events.emit('task.cancelled', task.session_id, { taskId: task.id });
    return { task: cancelled };
  }

  /** Resolves when the task is no longer running in this process. */
  async wait(taskId: string): Promise<TaskRow> {
    await this.running.get(taskId)?.done;
    return this.getTask(taskId);
  }

  async getTask(id: string): Promise<TaskRow> {
    const task = await this.deps.store.findTask(id);
    if (!task)
      throw new CairnError('TASK_NOT_FOUND', `Task "${id}" not found. List tasks with GET /tasks.`);
    return task;
  }

  /** Resolves when every task running in this process has stopped. */
  async drain(): Promise<void> {
    this.shuttingDown = true;
    await Promise.all([...this.running.values()].map((r) => r.done));
  }

  /** Aborts every running task (shutdown after the grace period). */
  abortAll(): void {
    for (const running of this.running.values())
      running.controller.abort(new Error('server shutting down'));
  }

  /**
   * Runs `turn` in the background, in the task's session slot, and settles
   * the task's row by how it ended — in the slot, before it is released: a
   * chat queued behind the task then finds it waiting (409 `TASK_WAITING`)
   * instead of slipping in between and answering the call the task waits on.
   * When that write cannot land (the database is away, the slot lost), the
   * task is settled once the database is back, as `interrupted` (resumable),
   * so it never stays `running` with nobody to settle it.
   */
  private start(
    task: TaskRow,
    agent: AgentConfig,
    turn: (
      signal: AbortSignal,
      session: SessionRow,
      runTurn: RunTurn,
      writes: TurnWrites,
    ) => Promise<TurnResult>,
  ): void {
    const controller = new AbortController();
    const cancelled = (): boolean => controller.signal.aborted;
    const done = this.deps.engine
      .withTurnSlot(task.session_id, agent, async (session, runTurn, writes) => {
        const outcome = await turn(
          controller.signal,
          session,
          (request) =>
            // Every append of the run checks the task is still this instance's:
            // a peer may declare it dead (paused past the stale limit) meanwhile.
            runTurn({ ...request, runningTask: task.id }),
          writes,
        ).then((result) => result.outcome, outcomeOfError);
        const settlement = this.settlementOf(task, outcome, cancelled());
        try {
          return { settlement, row: await settlement.record(writes), late: false };
        } catch (err) {
          // A run that stopped keeps its own account of why; a result that
          // could not be recorded leaves the task interrupted by what
          // stopped the write (the database, the lock), to be resumed.
          const late =
            stopError(outcome) !== undefined || cancelled()
              ? settlement
              : this.failure(task, err, false);
          return { settlement: late, row: undefined, late: true };
        }
      })
      .then(
        ({ settlement, row, late }) =>
          late ? this.settleLate(task, settlement) : this.announce(task, settlement, row),
        // The slot could not be taken (the session closed, the database away).
        (err: unknown) => this.settleLate(task, this.failure(task, err, cancelled())),
      )
      .catch((err: unknown) =>
        this.deps.log?.(
          { taskId: task.id, error: describeError(err) },
          'task could not be settled',
        ),
      )
      .finally(() => this.running.delete(task.id));
    this.running.set(task.id, { controller, done });
  }

  /** The task's row after its turn, by how the turn ended. */
  private settlementOf(task: TaskRow, outcome: TurnOutcome, cancelled: boolean): Settlement {
    switch (outcome.kind) {
      case 'approval': {
        const { call, approvalTimeout } = outcome;
        return {
          record: (writes) =>
            recordApprovalWait(
              {
                store: writes,
                ...(this.deps.approvalTimer ? { approvalTimer: this.deps.approvalTimer } : {}),
              },
              task,
              call,
              approvalTimeout,
            ),
          announce: (waiting) => announceApprovalWait(this.deps, waiting, call),
        };
      }
      case 'question': {
        const { question, callId } = outcome;
        return this.transition(
          task,
          { status: 'waiting', question, pending_call_id: callId },
          'task.waiting',
          { question },
        );
      }
      case 'reply':
      case 'client-tools':
        return this.transition(
          task,
          { status: 'completed', result: outcome.reply },
          'task.completed',
          {},
        );
      case 'limit':
      case 'failed':
        return this.failure(task, outcome.error, cancelled);
      case 'held-question':
      case 'held-approval':
        // A task's turn holds nothing: the task itself waits.
        return impossibleOutcome(outcome);
      default:
        return unreachableOutcome(outcome);
    }
  }

  /** A run that stopped on `err` (or was cancelled): its status and event. */
  private failure(task: TaskRow, err: unknown, cancelled: boolean): Settlement {
    if (cancelled) {
      return this.transition(
        task,
        { status: 'cancelled', error: 'Cancelled by request.' },
        'task.cancelled',
        {},
      );
    }
    // Unknown errors may carry internals: the row gets a generic text, the log the detail.
    const message =
      err instanceof CairnError
        ? `${err.code}: ${err.message}`
        : 'INTERNAL: The task failed unexpectedly; the server log has the details.';
    if (!(err instanceof CairnError))
      this.deps.log?.({ taskId: task.id, error: describeError(err) }, 'task failed');
    // A run cut short by a database outage (or its session lock lost with the
    // connection) did nothing wrong: it ends `interrupted`, as after a crash,
    // so it can be resumed once the database is back.
    const outage = isOutage(err);
    return this.transition(
      task,
      { status: outage ? 'interrupted' : 'failed', error: message },
      outage ? 'task.interrupted' : 'task.failed',
      { error: message },
    );
  }

  /** A move of the running task to `patch`, announced by `event`. */
  private transition(
    task: TaskRow,
    patch: TaskPatch,
    event: string,
    data: Record<string, unknown>,
  ): Settlement {
    const { events } = this.deps;
    return {
      record: (writes) => writes.transitionTask(task.id, ['running'], patch),
      announce: async () => {
        await events.emit(event, task.session_id, { taskId: task.id, ...data });
      },
    };
  }

  /**
   * Announces a settled task. Nothing to announce when its row was no longer
   * `running`: a peer took it over (or recovery interrupted it), so the task
   * is not this run's any more.
   */
  private async announce(
    task: TaskRow,
    settlement: Settlement,
    row: TaskRow | undefined,
  ): Promise<void> {
    if (row) await this.untilStored(task, () => settlement.announce(row));
  }

  /** Settles a task whose status could not be written in its slot, once the database takes it. */
  private async settleLate(task: TaskRow, settlement: Settlement): Promise<void> {
    // The slot is gone: the store itself, by the status's compare-and-set alone.
    const row = await this.untilStored(task, () => settlement.record(this.deps.store));
    await this.announce(task, settlement, row);
  }

  /**
   * Runs a write that closes out a run until it lands: while the database is
   * away it fails, and a task whose final status is never written would stay
   * `running` for good (its owner is alive, so no sweep takes it over).
   * Retried with backoff; logged once. At shutdown the row is left to the
   * next start's recovery, which interrupts a dead instance's running tasks.
   */
  private async untilStored<T>(task: TaskRow, write: () => Promise<T>): Promise<T | undefined> {
    let wait = SETTLE_RETRY_MS.first;
    let logged = false;
    for (;;) {
      try {
        return await write();
      } catch (err) {
        if (this.shuttingDown) throw err;
        if (!logged) {
          this.deps.log?.(
            { taskId: task.id, error: describeError(err) },
            'task status could not be stored; retrying until the database is back',
          );
          logged = true;
        }
        await new Promise((resolve) => setTimeout(resolve, wait));
        wait = Math.min(wait * 2, SETTLE_RETRY_MS.max);
      }
    }
  }
}
