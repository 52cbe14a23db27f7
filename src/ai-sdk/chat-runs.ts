/**
 * The AI SDK chats' turns that are running on this instance. A turn runs on
 * its own, whoever listens: the request that started it only streams it, so a
 * dropped connection does not cancel it. Each run keeps the UI message chunks
 * it sent, so a client that reconnects (`GET …/:chatId/stream`) gets the
 * whole assistant message again and then what follows — the SDK's transport
 * treats a resumed stream as a replay. `stop` aborts a run.
 */
import { createUIMessageStream, type UIMessageChunk } from 'ai';

type Listener = (chunk: UIMessageChunk | null) => void;

/** One running turn of a chat: the chunks sent so far, and who follows them. */
export class ChatRun {
  private readonly sent: UIMessageChunk[] = [];
  private readonly listeners = new Set<Listener>();
  private ended = false;
  /** Aborted by `stop` (or the server closing): the turn's signal. */
  readonly cancel = new AbortController();

  get isEnded(): boolean {
    return this.ended;
  }

  send(chunk: UIMessageChunk): void {
    if (this.ended) return;
    this.sent.push(chunk);
    for (const listener of this.listeners) listener(chunk);
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    for (const listener of this.listeners) listener(null);
    this.listeners.clear();
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

/** The running turns of this instance, by session. */
export class ChatRuns {
  private readonly runs = new Map<string, ChatRun>();

  /** A new run on `sessionId`; it is the session's active run until it ends. */
  start(sessionId: string): ChatRun {
    const run = new ChatRun();
    this.runs.set(sessionId, run);
    return run;
  }

  /** Ends `run` and forgets it, unless a newer run of the session replaced it. */
  finish(sessionId: string, run: ChatRun): void {
    run.end();
    if (this.runs.get(sessionId) === run) this.runs.delete(sessionId);
  }

  /** The session's run that has not ended, if this instance runs one. */
  active(sessionId: string): ChatRun | undefined {
    const run = this.runs.get(sessionId);
    return run && !run.isEnded ? run : undefined;
  }
}
