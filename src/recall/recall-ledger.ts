/**
 * The tokens of the recall block each session's last model call carried.
 * The context guard's estimate starts from that call's reported prompt,
 * which includes the block; the next call replaces the block rather than
 * keeping it, so the estimate takes it out again. In memory: another
 * instance's block is simply not taken out (the estimate errs high, the safe way).
 */

/** Sessions remembered at most (the least recently written dropped). */
export const MAX_LEDGER_SESSIONS = 10_000;

export class RecallLedger {
  private readonly tokensBySession = new Map<string, number>();

  set(sessionId: string, tokens: number): void {
    this.tokensBySession.delete(sessionId);
    if (tokens <= 0) return;
    this.tokensBySession.set(sessionId, tokens);
    if (this.tokensBySession.size > MAX_LEDGER_SESSIONS) {
      // Over the bound, so not empty: the first key is the least recently written.
      this.tokensBySession.delete(this.tokensBySession.keys().next().value!);
    }
  }

  tokens(sessionId: string): number {
    return this.tokensBySession.get(sessionId) ?? 0;
  }
}
