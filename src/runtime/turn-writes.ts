/**
 * The one write door of a session's slot. Everything a turn writes — its
 * messages, a task's status, a landed compaction, memory notes, events — goes
 * through a `TurnWrites`, which the turn engine hands to the work it runs
 * under the session's lock and nowhere else. Each write is refused with
 * `SESSION_LOCK_LOST` once the slot is lost, and every write after the slot
 * ended is refused the same way: a peer may run the session by then. Code
 * that runs in a turn gets the store's reads (`StoreReader`) and this port,
 * never the store: a write past the lock does not compile.
 */
import { CairnError } from '../errors.js';
import type { ChatMessage } from '../llm/messages.js';
import type {
  AppendedWithEvents,
  AppendOptions,
  EventRow,
  MemoryNote,
  MemoryWriteOptions,
  NewCompaction,
  NewTask,
  SessionRow,
  Store,
  TaskPatch,
  TaskRow,
  TaskStatus,
} from '../store/store.js';
import type { EventBus } from './event-bus.js';
import { sessionLockLost } from './session-lock.js';

/** What a turn may read of the store: reads only; its writes go through its `TurnWrites`. */
export type StoreReader = Pick<
  Store,
  | 'findSession'
  | 'findSessionWithWaitingTask'
  | 'loadContext'
  | 'listTail'
  | 'listMessages'
  | 'listMessageMeta'
  | 'recallMessages'
  | 'searchHistory'
  | 'listMemory'
  | 'findTask'
  | 'findWaitingTaskForSession'
>;

/**
 * The writes of the work that holds one session's slot, bound to that
 * session. A task's status moves by its id (a compare-and-set on its status,
 * as the store's); the rest are the session's own.
 */
export interface TurnWrites {
  readonly sessionId: string;
  /** Aborted when the slot is lost: what runs in the slot (a tool call) stops writing. */
  readonly slot: AbortSignal;
  /** Appends messages with their `message.created` events in one commit, fenced by `options.ifVersion`. */
  appendMessages(messages: ChatMessage[], options?: AppendOptions): Promise<AppendedWithEvents>;
  /** A task on the session (a held approval's). */
  createTask(input: Omit<NewTask, 'sessionId'>): Promise<TaskRow>;
  /** The store's compare-and-set on a task's status. */
  transitionTask(
    id: string,
    from: readonly TaskStatus[],
    patch: TaskPatch,
  ): Promise<TaskRow | undefined>;
  /** Lands a summary with its compare-and-set on the pointer; undefined when the pointer moved. */
  landCompaction(input: Omit<NewCompaction, 'sessionId'>): Promise<SessionRow | undefined>;
  /** Suspends automatic compaction on the session. */
  suspendCompaction(): Promise<void>;
  /** Removes the session's prepared summary (landed or outdated); with `holder`, only that holder's. */
  dropPreparation(holder?: string): Promise<void>;
  putMemory(
    agentName: string,
    key: string,
    content: string,
    options?: MemoryWriteOptions,
  ): Promise<MemoryNote>;
  deleteMemory(agentName: string, key: string, options?: MemoryWriteOptions): Promise<boolean>;
  /**
   * Deletes the session when nothing was stored on it since `lastSeq` was
   * read: a session made for a turn that failed before it began leaves nothing
   * behind, and nothing queued on its announced id runs on it first.
   */
  dropSessionIfUntouched(lastSeq: number): Promise<void>;
  /** Records and publishes an event of the session (the event bus's `emit`, for this session only). */
  emit(type: string, sessionId: string, data: Record<string, unknown>): Promise<EventRow>;
}

/** The raw writes the port is made of: held by the composition root's `TurnWriter` alone. */
export type TurnWriteStore = Pick<
  Store,
  | 'appendMessagesWithEvents'
  | 'createTask'
  | 'transitionTask'
  | 'commitCompaction'
  | 'setCompactionSuspended'
  | 'dropPreparation'
  | 'putMemory'
  | 'deleteMemory'
  | 'findSession'
  | 'deleteSession'
>;

/** A port and the way to close it, once the slot's work has ended. */
export interface OpenedWrites {
  writes: TurnWrites;
  /** Closes the port: every later write is refused with `SESSION_LOCK_LOST`. */
  readonly end: () => void;
}

/**
 * Makes the ports of session slots. The turn engine holds one and opens a
 * port only inside the lock it holds; it cannot write through the store
 * itself.
 */
export class TurnWriter {
  constructor(
    private readonly store: TurnWriteStore,
    private readonly events: Pick<EventBus, 'emit'>,
  ) {}

  /** A port for `sessionId`, valid while `slot` is not aborted and until `end()`. */
  open(sessionId: string, slot: AbortSignal): OpenedWrites {
    let ended = false;
    const { store, events } = this;
    const door = async <T>(write: () => Promise<T>): Promise<T> => {
      slot.throwIfAborted();
      if (ended) throw sessionLockLost();
      return write();
    };
    const writes: TurnWrites = {
      sessionId,
      slot,
      appendMessages: (messages, options) =>
        door(() => store.appendMessagesWithEvents(sessionId, messages, 'message.created', options)),
      createTask: (input) => door(() => store.createTask({ ...input, sessionId })),
      transitionTask: (id, from, patch) => door(() => store.transitionTask(id, from, patch)),
      landCompaction: (input) => door(() => store.commitCompaction({ ...input, sessionId })),
      suspendCompaction: () => door(() => store.setCompactionSuspended(sessionId, true)),
      dropPreparation: (holder) => door(() => store.dropPreparation(sessionId, holder)),
      putMemory: (agentName, key, content, options) =>
        door(() => store.putMemory(agentName, key, content, options)),
      deleteMemory: (agentName, key, options) =>
        door(() => store.deleteMemory(agentName, key, options)),
      dropSessionIfUntouched: (lastSeq) =>
        door(async () => {
          const current = await store.findSession(sessionId);
          if (current && current.last_seq === lastSeq) await store.deleteSession(sessionId);
        }),
      emit: (type, eventSession, data) =>
        door(() => {
          // Bound to its session: another session's events are not this slot's to write.
          if (eventSession !== sessionId)
            throw new CairnError(
              'INTERNAL',
              `An event of session "${eventSession}" was written through the slot of "${sessionId}".`,
            );
          return events.emit(type, sessionId, data);
        }),
    };
    return {
      writes,
      end: () => {
        ended = true;
      },
    };
  }
}
