/**
 * The A2A methods of one agent, on Cairn's tasks. The SDK's JSON-RPC
 * transport parses and answers the envelope; this class is what it calls.
 *
 * - `SendMessage` without a `taskId` starts a task (in the session named by
 *   `contextId`, or a new one); with a `taskId` it answers that task: the
 *   `ask_user` answer, the approve / deny decision, or the go-ahead for a task
 *   a restart interrupted. It waits for the task to settle unless the peer
 *   asked `returnImmediately`.
 * - `SendStreamingMessage` / `SubscribeToTask` stream the task: its snapshot,
 *   then a status update per change (the reply as an artifact update before
 *   `completed`), until it completes, fails, is cancelled or needs input.
 * - Every failure is an A2A error with a JSON-RPC code; nothing internal leaks.
 */
import type {
  AgentCard,
  CancelTaskRequest,
  DeleteTaskPushNotificationConfigRequest,
  GetTaskPushNotificationConfigRequest,
  GetTaskRequest,
  ListTaskPushNotificationConfigsRequest,
  ListTaskPushNotificationConfigsResponse,
  ListTasksRequest,
  ListTasksResponse,
  Message,
  SendMessageRequest,
  StreamResponse,
  SubscribeToTaskRequest,
  Task,
  TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import { Role, TaskState } from '@a2a-js/sdk';
import {
  A2AError,
  ContentTypeNotSupportedError,
  PushNotificationNotSupportedError,
  RequestMalformedError,
  TaskNotCancelableError,
  TaskNotFoundError,
  UnsupportedOperationError,
} from '@a2a-js/sdk/errors';
import type { A2ARequestHandler, ServerCallContext } from '@a2a-js/sdk/server';
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError, describeError } from '../errors.js';
import { USER_TEXT } from '../http/schemas.js';
import type { StoredMessage } from '../llm/messages.js';
import type { EventBus, Subscription } from '../runtime/event-bus.js';
import type { TaskRunner } from '../runtime/task-runner.js';
import type { MessageLog, SessionStore, TaskRow, TaskStore } from '../store/store.js';
import type { A2AAccess } from './access.js';
import {
  approvalDecision,
  approvalPrompt,
  hasFileParts,
  isSettled,
  isTerminal,
  messageText,
  replyArtifact,
  statusForState,
  taskStatus,
  textPart,
  toA2ATask,
} from './task-view.js';

/** Where the route puts the signal that fires when the peer goes away mid-stream. */
export const STREAM_ABORT_KEY = 'cairn.streamAbort';

/** Tasks a `tasks/list` page holds when the peer names no `pageSize`, and the most it may name. */
const PAGE_SIZE = { default: 50, max: 100 } as const;
/** A message's text, its parts joined, is refused past the chat route's own limit. */
const MAX_INPUT_CHARS = USER_TEXT.maxLength;

export interface CairnA2AHandlerDeps {
  agent: AgentConfig;
  /** The agent's card, in the SDK's form (the transport asks for it). */
  card: AgentCard;
  access: A2AAccess;
  tasks: Pick<
    TaskRunner,
    'runTask' | 'resumeTask' | 'decideApproval' | 'cancelTask' | 'wait' | 'getTask'
  >;
  store: Pick<TaskStore, 'findTask' | 'listTasks'> &
    Pick<SessionStore, 'findSession'> &
    Pick<MessageLog, 'listMessages'>;
  events: Pick<EventBus, 'subscribe'>;
  /** Where unexpected failures are reported (the peer only hears that one happened). */
  log: (details: Record<string, unknown>, message: string) => void;
}

export class CairnA2AHandler implements A2ARequestHandler {
  constructor(private readonly deps: CairnA2AHandlerDeps) {}

  async getAgentCard(): Promise<AgentCard> {
    return this.deps.card;
  }

  async getAuthenticatedExtendedAgentCard(): Promise<AgentCard> {
    throw new UnsupportedOperationError(
      'This agent has no extended card: its card at .well-known/agent-card.json is the whole of it.',
    );
  }

  async sendMessage(params: SendMessageRequest): Promise<Task> {
    return this.withA2AErrors(async () => {
      let task = await this.accept(params);
      if (params.configuration?.returnImmediately !== true)
        task = await this.deps.tasks.wait(task.id);
      return toA2ATask(task, params.configuration?.historyLength);
    });
  }

  async *sendMessageStream(
    params: SendMessageRequest,
    context: ServerCallContext,
  ): AsyncGenerator<StreamResponse, void, undefined> {
    const signal = abortSignalOf(context);
    // Subscribed before the task starts, so no change of its state is missed.
    const follower = this.follow(signal);
    try {
      await follower.live;
      const task = await this.withA2AErrors(() => this.accept(params));
      yield* this.stream(task, follower, params.configuration?.historyLength);
    } catch (err) {
      throw this.toA2AError(err);
    } finally {
      follower.stop();
    }
  }

  async *resubscribe(
    params: SubscribeToTaskRequest,
    context: ServerCallContext,
  ): AsyncGenerator<StreamResponse, void, undefined> {
    const follower = this.follow(abortSignalOf(context));
    try {
      await follower.live;
      const task = await this.withA2AErrors(() => this.visibleTask(params.id));
      if (isTerminal(task.status)) {
        throw new UnsupportedOperationError(
          `Task "${task.id}" is ${a2aWord(task)}: there is nothing more to follow. Read it with GetTask.`,
        );
      }
      yield* this.stream(task, follower, undefined);
    } catch (err) {
      throw this.toA2AError(err);
    } finally {
      follower.stop();
    }
  }

  async getTask(params: GetTaskRequest): Promise<Task> {
    return this.withA2AErrors(async () =>
      toA2ATask(await this.visibleTask(params.id), params.historyLength),
    );
  }

  async listTasks(params: ListTasksRequest): Promise<ListTasksResponse> {
    return this.withA2AErrors(async () => {
      const pageSize = params.pageSize ?? PAGE_SIZE.default;
      if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > PAGE_SIZE.max)
        throw new RequestMalformedError(`pageSize must be an integer from 1 to ${PAGE_SIZE.max}.`);
      if (params.statusTimestampAfter !== undefined)
        throw new UnsupportedOperationError(
          'statusTimestampAfter is not supported: page through the tasks (newest first) instead.',
        );
      validHistoryLength(params.historyLength);
      const unfiltered = params.status === TaskState.TASK_STATE_UNSPECIFIED;
      const status = unfiltered ? undefined : statusForState(params.status);
      if (status === null) return { tasks: [], nextPageToken: '', pageSize, totalSize: 0 };
      const page = await this.deps.store.listTasks({
        agentName: this.deps.agent.name,
        ...(status !== undefined ? { status } : {}),
        ...(params.contextId ? { sessionId: params.contextId } : {}),
        ...(this.deps.access.ownerKey !== undefined ? { ownerKey: this.deps.access.ownerKey } : {}),
        ...(params.pageToken ? { cursor: params.pageToken } : {}),
        limit: pageSize,
      });
      const tasks = page.items
        .filter((row) => this.deps.access.maySeeTask(row))
        .map((row) => {
          const task = toA2ATask(row, params.historyLength);
          return params.includeArtifacts === true ? task : { ...task, artifacts: [] };
        });
      // Cairn does not count matching tasks: totalSize is what this page holds.
      return { tasks, nextPageToken: page.nextCursor ?? '', pageSize, totalSize: tasks.length };
    });
  }

  async cancelTask(params: CancelTaskRequest): Promise<Task> {
    return this.withA2AErrors(async () => {
      const task = await this.visibleTask(params.id);
      if (isTerminal(task.status)) {
        throw new TaskNotCancelableError(
          `Task "${task.id}" is ${a2aWord(task)} and can no longer be cancelled.`,
        );
      }
      return toA2ATask(await this.deps.tasks.cancelTask(task.id));
    });
  }

  createTaskPushNotificationConfig(): Promise<TaskPushNotificationConfig> {
    return noPush();
  }

  getTaskPushNotificationConfig(
    _params: GetTaskPushNotificationConfigRequest,
  ): Promise<TaskPushNotificationConfig> {
    return noPush();
  }

  listTaskPushNotificationConfigs(
    _params: ListTaskPushNotificationConfigsRequest,
  ): Promise<ListTaskPushNotificationConfigsResponse> {
    return noPush();
  }

  deleteTaskPushNotificationConfig(
    _params: DeleteTaskPushNotificationConfigRequest,
  ): Promise<void> {
    return noPush();
  }

  /** Starts or continues a task with the peer's message; resolves once the row says so. */
  private async accept(params: SendMessageRequest): Promise<TaskRow> {
    const message = params.message;
    if (message === undefined || message.parts.length === 0)
      throw new RequestMalformedError('params.message with at least one part is required.');
    if (message.role === Role.ROLE_AGENT)
      throw new RequestMalformedError('The message must come from the user (role ROLE_USER).');
    validHistoryLength(params.configuration?.historyLength);
    if (message.taskId !== '') return this.continueTask(message);
    return this.startTask(message);
  }

  private async startTask(message: Message): Promise<TaskRow> {
    const input = inputText(message);
    const { agent, access, store, tasks } = this.deps;
    if (message.contextId !== '') {
      const session = await store.findSession(message.contextId);
      if (!session || !access.maySeeSession(session) || session.agent_name !== agent.name) {
        throw new RequestMalformedError(
          `contextId "${message.contextId}" is not a conversation of agent "${agent.name}". Omit contextId to start a new one, or use the contextId of an earlier task of this agent.`,
        );
      }
    }
    return tasks.runTask({
      agentName: agent.name,
      input,
      owner: access.owner,
      ...(message.contextId !== '' ? { sessionId: message.contextId } : {}),
    });
  }

  private async continueTask(message: Message): Promise<TaskRow> {
    const task = await this.visibleTask(message.taskId);
    if (message.contextId !== '' && message.contextId !== task.session_id) {
      throw new RequestMalformedError(
        `Task "${task.id}" belongs to context "${task.session_id}", not "${message.contextId}".`,
      );
    }
    const { tasks } = this.deps;
    if (task.status === 'waiting' && task.pending_tool !== null) {
      if (hasFileParts(message)) throw filesRefused();
      const decision = approvalDecision(message);
      if (decision === undefined) {
        throw new RequestMalformedError(
          `Task "${task.id}" waits for a decision, not an answer. ${approvalPrompt(task.pending_tool, task.pending_arguments ?? '')} Or send a data part {"decision": "approve"} / {"decision": "deny", "reason": "…"}.`,
        );
      }
      return tasks.decideApproval({ taskId: task.id, ...decision, by: this.deps.access.owner });
    }
    if (task.status === 'waiting')
      return tasks.resumeTask({ taskId: task.id, answer: inputText(message) });
    if (task.status === 'interrupted') {
      if (hasFileParts(message)) throw filesRefused();
      const answer = messageText(message);
      return tasks.resumeTask({ taskId: task.id, ...(answer !== undefined ? { answer } : {}) });
    }
    if (task.status === 'running') {
      throw new UnsupportedOperationError(
        `Task "${task.id}" is still working and takes no message now. Follow it with SubscribeToTask, or wait and read it with GetTask.`,
      );
    }
    throw new UnsupportedOperationError(
      `Task "${task.id}" is ${a2aWord(task)}; a finished task takes no more messages. To go on with the conversation, send a new message with contextId "${task.session_id}" and no taskId.`,
    );
  }

  /** The task, if it is this agent's and the caller may see it; else TaskNotFound (existence is not revealed). */
  private async visibleTask(id: string): Promise<TaskRow> {
    if (id.trim() === '') throw new RequestMalformedError('A task id is required.');
    const task = await this.deps.store.findTask(id);
    if (!task || task.agent_name !== this.deps.agent.name || !this.deps.access.maySeeTask(task)) {
      throw new TaskNotFoundError(
        `Task "${id}" not found for agent "${this.deps.agent.name}". List this agent's tasks with ListTasks.`,
      );
    }
    return task;
  }

  /**
   * The task's snapshot, then the events of each change until it settles:
   * while it works, a `working` status update for each step in which the
   * agent calls tools; at the end, the reply and the final status.
   */
  private async *stream(
    first: TaskRow,
    follower: TaskFollower,
    historyLength: number | undefined,
  ): AsyncGenerator<StreamResponse, void, undefined> {
    follower.track(first);
    yield { payload: { $case: 'task', value: toA2ATask(first, historyLength) } };
    let last = first;
    while (!isSettled(last.status)) {
      if (!(await follower.next())) return;
      for (const seq of follower.takeAgentMessages()) {
        const [message] = await this.deps.store.listMessages(first.session_id, {
          afterSeq: seq - 1,
          limit: 1,
        });
        const tools = (message?.seq === seq ? (message.tool_calls ?? []) : [])
          .map((call) => call.function.name)
          // A question arrives as input-required, not as progress.
          .filter((name) => name !== 'ask_user');
        if (tools.length > 0) yield progressEvent(last, message!, tools);
      }
      const row = await this.deps.store.findTask(first.id);
      if (!row) return;
      if (row.status === last.status && row.updated_at === last.updated_at) continue;
      yield* changeEvents(row);
      last = row;
    }
  }

  private follow(signal: AbortSignal | undefined): TaskFollower {
    return new TaskFollower(this.deps.events, signal);
  }

  /** Runs `work`; anything that is not already an A2A error becomes one. */
  private async withA2AErrors<T>(work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      throw this.toA2AError(err);
    }
  }

  private toA2AError(err: unknown): A2AError {
    if (err instanceof A2AError) return err;
    if (err instanceof CairnError) {
      const metadata = { cairnCode: err.code };
      if (err.code === 'TASK_NOT_FOUND')
        return new TaskNotFoundError({ message: err.message, metadata });
      // A conflict with the task's or session's state: the message cannot be taken now.
      if (err.status === 409) {
        const hint =
          err.code === 'TASK_WAITING'
            ? ' Over A2A, answer it with a message that carries its taskId.'
            : '';
        return new UnsupportedOperationError({ message: `${err.message}${hint}`, metadata });
      }
      // What the peer sent names something missing or unusable (a closed session, …).
      if (err.status === 400 || err.status === 404)
        return new RequestMalformedError({ message: err.message, metadata });
      // Cairn's messages say what happened and what to do, without internals.
      return new A2AError({ message: `${err.code}: ${err.message}`, metadata });
    }
    this.deps.log({ agent: this.deps.agent.name, error: describeError(err) }, 'A2A request failed');
    return new A2AError('Internal error. The server log has the details.');
  }
}

/**
 * Wakes a stream when the task it follows may have changed (any task event
 * naming it), when the agent wrote a message in the task's session (its
 * progress), or when the peer went away. Listening starts at construction,
 * before the task is known, so nothing in between is missed.
 */
class TaskFollower {
  private taskId: string | undefined;
  private sessionId: string | undefined;
  private dirty = false;
  /** Seqs of the agent's messages not yet reported, with their sessions (kept until the task is known). */
  private agentMessages: { sessionId: string; seq: number }[] = [];
  private wake: (() => void) | undefined;
  private readonly subscription: Subscription;
  private readonly onAbort = (): void => this.wake?.();

  constructor(
    events: Pick<EventBus, 'subscribe'>,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.subscription = events.subscribe((event) => {
      if (event.type === 'message.created' && event.data.role === 'assistant') {
        const { seq } = event.data;
        if (event.session_id === null || typeof seq !== 'number') return;
        if (this.sessionId !== undefined && event.session_id !== this.sessionId) return;
        this.agentMessages.push({ sessionId: event.session_id, seq });
      } else if (!event.type.startsWith('task.')) return;
      else if (this.taskId !== undefined && event.data.taskId !== this.taskId) return;
      this.dirty = true;
      this.wake?.();
    });
    signal?.addEventListener('abort', this.onAbort);
  }

  /** Resolves once the follower gets events (start the task only then). */
  get live(): Promise<void> {
    return this.subscription.live;
  }

  track(task: TaskRow): void {
    this.taskId = task.id;
    this.sessionId = task.session_id;
  }

  /** Resolves true once something happened to the task since the last call; false if the peer left. */
  async next(): Promise<boolean> {
    if (!this.dirty && !this.signal?.aborted)
      await new Promise<void>((resolve) => (this.wake = resolve));
    this.wake = undefined;
    this.dirty = false;
    return !this.signal?.aborted;
  }

  /** The seqs of the agent's new messages in the task's session, once each. */
  takeAgentMessages(): number[] {
    const seqs = this.agentMessages.filter((m) => m.sessionId === this.sessionId).map((m) => m.seq);
    this.agentMessages = [];
    return seqs;
  }

  stop(): void {
    this.subscription.close();
    this.signal?.removeEventListener('abort', this.onAbort);
    this.wake?.();
  }
}

/** A `working` status update saying which tools the agent is calling. */
function progressEvent(task: TaskRow, step: StoredMessage, tools: string[]): StreamResponse {
  const message: Message = {
    messageId: `${task.id}-progress-${step.seq}`,
    contextId: task.session_id,
    taskId: task.id,
    role: Role.ROLE_AGENT,
    parts: [textPart(`Calling ${tools.map((t) => `"${t}"`).join(', ')}.`)],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
  return {
    payload: {
      $case: 'statusUpdate',
      value: {
        taskId: task.id,
        contextId: task.session_id,
        status: {
          state: TaskState.TASK_STATE_WORKING,
          message,
          timestamp: step.created_at,
        },
        metadata: undefined,
      },
    },
  };
}

/** The events a change to `row` makes: a completed task's reply as an artifact, then the new status. */
function* changeEvents(row: TaskRow): Generator<StreamResponse> {
  const artifact = replyArtifact(row);
  if (artifact) {
    yield {
      payload: {
        $case: 'artifactUpdate',
        value: {
          taskId: row.id,
          contextId: row.session_id,
          artifact,
          append: false,
          lastChunk: true,
          metadata: undefined,
        },
      },
    };
  }
  yield {
    payload: {
      $case: 'statusUpdate',
      value: {
        taskId: row.id,
        contextId: row.session_id,
        status: taskStatus(row),
        metadata: undefined,
      },
    },
  };
}

function abortSignalOf(context: ServerCallContext): AbortSignal | undefined {
  const signal = context.state.get(STREAM_ABORT_KEY);
  return signal instanceof AbortSignal ? signal : undefined;
}

/** The text of a message that must have some (a new task's input, an answer). */
function inputText(message: Message): string {
  if (hasFileParts(message)) throw filesRefused();
  const text = messageText(message);
  if (text === undefined)
    throw new RequestMalformedError(
      'The message has no text: send at least one non-empty text part.',
    );
  if (text.length > MAX_INPUT_CHARS)
    throw new RequestMalformedError(
      `The message text is longer than ${MAX_INPUT_CHARS} characters.`,
    );
  return text;
}

function validHistoryLength(historyLength: number | undefined): void {
  if (historyLength === undefined) return;
  if (!Number.isInteger(historyLength) || historyLength < 0)
    throw new RequestMalformedError('historyLength must be a whole number, 0 or more.');
}

function filesRefused(): A2AError {
  return new ContentTypeNotSupportedError(
    'This agent takes text and data parts only; send file contents as text.',
  );
}

/** The task's A2A state in words, for error messages ("completed", "canceled"). */
function a2aWord(task: TaskRow): string {
  return task.status === 'cancelled' ? 'canceled' : task.status;
}

async function noPush(): Promise<never> {
  throw new PushNotificationNotSupportedError(
    'Cairn agents do not send push notifications: follow a task with SendStreamingMessage or SubscribeToTask, or poll GetTask.',
  );
}
