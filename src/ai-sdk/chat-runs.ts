/**
 * The AI SDK chats' running turns. A turn runs on its own, whoever listens:
 * the request that started it only streams it, so a dropped connection does
 * not cancel it. Each run keeps the UI message chunks it sent, so a client
 * that reconnects (`GET …/:chatId/stream`) gets the whole assistant message
 * again and then what follows — the SDK's transport treats a resumed stream
 * as a replay. `stop` aborts a run.
 *
 * Instances sharing a database (Postgres) see each other's turns through the
 * chat stream log (`ChatStreamStore`): the running instance writes its chunks in
 * batches, at most every `FLUSH_MS`, and reads the turn's stop flag with each
 * batch or, when the turn is silent, every `STOP_CHECK_MS`; another instance
 * replays the batches and polls for more every `FOLLOW_POLL_MS`, only while a
 * client follows it. The instance running a turn serves it from memory.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createUIMessageStream, type UIMessageChunk } from 'ai';
import type { ChatStreamStore } from '../store/store.js';

/** How long chunks wait to be written together: a resume elsewhere lags the turn by about this. */
export const FLUSH_MS = 200;
/** How long a running turn goes at most without reading its stop flag (a write reads it too). */
export const STOP_CHECK_MS = 1_000;
const STOP_TICK_MS = 250;
/** How often an instance following another's turn reads the new batches. */
export const FOLLOW_POLL_MS = 250;

type Listener = (chunk: UIMessageChunk | null) => void;

/** Who this instance is, and when another instance counts as gone. */
export interface ChatStreamLiveness {
  self: string;
  /** A holder whose heartbeat is older than this is gone: its turn is not running. */
  staleAfterMs: number;
}

export interface ChatRunsOptions {
  store: ChatStreamStore;
  liveness: ChatStreamLiveness;
  /**
   * Whether other instances share the database. Alone (SQLite: one process
   * per file) nothing is written: this instance's memory is the whole story.
   */
  shared: boolean;
  /** A write of the log that failed: the turn goes on, served from memory. */
  onLogError: (err: unknown) => void;
}

/** One running turn of a chat: the chunks sent so far, and who follows them. */
export class ChatRun {
  private readonly sent: UIMessageChunk[] = [];
  private readonly listeners = new Set<Listener>();
  private ended = false;
  /** Aborted by `stop` (or the server closing): the turn's signal. */
  readonly cancel = new AbortController();
  private readonly log: RunLog | undefined;

  /** `log`, when given, makes the run's log, which aborts `cancel` on a stop read from the database. */
  constructor(log?: (cancel: AbortController) => RunLog) {
    this.log = log?.(this.cancel);
  }

  get isEnded(): boolean {
    return this.ended;
  }

  send(chunk: UIMessageChunk): void {
    if (this.ended) return;
    this.sent.push(chunk);
    this.log?.add(chunk);
    for (const listener of this.listeners) listener(chunk);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const listener of this.listeners) listener(null);
    this.listeners.clear();
  }

  /** Ends the run, then writes its last chunks and its end to the log. */
  async close(): Promise<void> {
    this.end();
    await this.log?.close();
  }

  /**
   * The run's chunks from the first, then live until it ends, as a UI message
   * stream. `signal` (the client going away) stops following, not the run.
   */
  follow(signal: AbortSignal): ReadableStream<UIMessageChunk> {
    return createUIMessageStream({
      execute: ({ writer }) =>
        new Promise<void>((resolve) => {
          for (const chunk of this.sent) writer.write(chunk);
          if (this.ended || signal.aborted) return resolve();
          const listener: Listener = (chunk) => {
            if (chunk) return writer.write(chunk);
            this.listeners.delete(listener);
            resolve();
          };
          this.listeners.add(listener);
          signal.addEventListener('abort', () => listener(null), { once: true });
        }),
    });
  }
}

/**
 * A run's chunks on their way to the chat stream log, in batches; each write
 * also reads whether another instance asked the turn to stop.
 */
class RunLog {
  private pending: UIMessageChunk[] = [];
  private seq = 0;
  private flushTimer: NodeJS.Timeout | undefined;
  private readonly stopTimer: NodeJS.Timeout;
  private writing: Promise<void> = Promise.resolve();
  private busy = false;
  /** When the last write (which reads the stop flag too) started: a silent turn reads it on its own. */
  private lastWrite = Date.now();

  constructor(
    private readonly options: ChatRunsOptions,
    private readonly sessionId: string,
    private readonly streamId: string,
    private readonly cancel: AbortController,
  ) {
    // Ticks often and reads only when nothing was written for a while: a read at least every STOP_CHECK_MS.
    this.stopTimer = setInterval(() => {
      if (!this.busy && Date.now() - this.lastWrite >= STOP_CHECK_MS - STOP_TICK_MS)
        void this.flush(false);
    }, STOP_TICK_MS);
    this.stopTimer.unref();
  }

  add(chunk: UIMessageChunk): void {
    this.pending.push(chunk);
    this.flushTimer ??= setTimeout(() => void this.flush(false), FLUSH_MS);
  }

  /** Writes what is pending (with `ended`, the end mark); the writes go in order. */
  flush(ended: boolean): Promise<void> {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const chunks = coalesce(this.pending.splice(0));
    const batch =
      chunks.length > 0 ? { seq: ++this.seq, chunks: JSON.stringify(chunks) } : undefined;
    this.busy = true;
    this.lastWrite = Date.now();
    this.writing = this.writing
      .then(() => this.options.store.writeChatStream(this.sessionId, this.streamId, batch, ended))
      .then(({ stopRequested }) => {
        if (stopRequested && !this.cancel.signal.aborted) this.cancel.abort(new Error('stopped'));
      })
      .catch((err: unknown) => this.options.onLogError(err))
      .finally(() => (this.busy = false));
    return this.writing;
  }

  /** The last batch and the end mark; nothing is read or written after it. */
  close(): Promise<void> {
    clearInterval(this.stopTimer);
    return this.flush(true);
  }
}

/** Consecutive text deltas of one text part as one: the log stores the text, not each delta's frame. */
function coalesce(chunks: UIMessageChunk[]): UIMessageChunk[] {
  const out: UIMessageChunk[] = [];
  for (const chunk of chunks) {
    const last = out.at(-1);
    if (chunk.type === 'text-delta' && last?.type === 'text-delta' && last.id === chunk.id)
      out[out.length - 1] = { ...last, delta: last.delta + chunk.delta };
    else out.push(chunk);
  }
  return out;
}

/** The running turns of this instance, by session, and the turns of others through the log. */
export class ChatRuns {
  private readonly runs = new Map<string, ChatRun>();

  constructor(private readonly options: ChatRunsOptions) {}

  /**
   * A new run on `sessionId`, recorded in the log when the database is
   * shared; it is the session's active run until it ends.
   */
  async start(sessionId: string, streamId: string): Promise<ChatRun> {
    const { store, liveness, shared } = this.options;
    if (shared) await store.openChatStream(sessionId, streamId, liveness.self);
    const run = new ChatRun(
      shared ? (cancel) => new RunLog(this.options, sessionId, streamId, cancel) : undefined,
    );
    this.runs.set(sessionId, run);
    return run;
  }

  /** Ends `run`, writes its end to the log and forgets it, unless a newer run of the session replaced it. */
  async finish(sessionId: string, run: ChatRun): Promise<void> {
    try {
      await run.close();
    } finally {
      if (this.runs.get(sessionId) === run) this.runs.delete(sessionId);
    }
  }

  /** The session's run that has not ended, if this instance runs one. */
  active(sessionId: string): ChatRun | undefined {
    const run = this.runs.get(sessionId);
    return run && !run.isEnded ? run : undefined;
  }

  /**
   * The session's turn running on another instance that still heartbeats, as
   * its stream id; undefined when none runs. This instance's own turns are
   * answered by `active` alone: the log may still show one that just ended.
   */
  async remote(sessionId: string): Promise<string | undefined> {
    if (!this.options.shared) return undefined;
    const state = await this.options.store.findChatStream(sessionId, this.options.liveness);
    if (!state || state.ended || !state.holderLive) return undefined;
    if (state.instanceId === this.options.liveness.self) return undefined;
    return state.streamId;
  }

  /** Asks another instance's turn on the session to stop; false when none runs. */
  async stopRemote(sessionId: string): Promise<boolean> {
    if ((await this.remote(sessionId)) === undefined) return false;
    return this.options.store.requestChatStop(sessionId, this.options.liveness);
  }

  /**
   * Another instance's turn `streamId`, from its first chunk, then as it is
   * written, until it ends, its instance stops heartbeating, a newer turn
   * replaces it or `signal` (the client going away) aborts.
   */
  followRemote(
    sessionId: string,
    streamId: string,
    signal: AbortSignal,
  ): ReadableStream<UIMessageChunk> {
    const { store, liveness } = this.options;
    return createUIMessageStream({
      execute: async ({ writer }) => {
        let after = 0;
        for (;;) {
          // The state first: a batch written with the end mark is then read below.
          const state = await store.findChatStream(sessionId, liveness);
          for (const batch of await store.readChatStream(sessionId, streamId, after)) {
            for (const chunk of JSON.parse(batch.chunks) as UIMessageChunk[]) writer.write(chunk);
            after = batch.seq;
          }
          if (!state || state.streamId !== streamId || state.ended || !state.holderLive) return;
          if (signal.aborted) return;
          await sleep(FOLLOW_POLL_MS, undefined, { signal }).catch(() => undefined);
        }
      },
    });
  }
}
