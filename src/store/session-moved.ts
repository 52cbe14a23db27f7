/**
 * The error of an append conditioned on a session row's version (a row this
 * process remembered instead of reading it again) that found the row changed
 * since: nothing was written. Never shown to a client — the turn engine reads
 * the session again, checks it anew and starts the turn over.
 */
export class SessionMovedError extends Error {
  constructor(readonly sessionId: string) {
    super(
      `Session "${sessionId}" changed since the version the append expected; nothing was written.`,
    );
    this.name = 'SessionMovedError';
  }
}
