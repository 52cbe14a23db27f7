/**
 * Summaries prepared off the turn. Once a session's prompt passes the
 * agent's `prepareAt`, its next summary is computed after the turn's reply
 * instead of on a later turn's wait, and kept in `prepared_compactions`; the
 * next turn lands it at its start, inside the session's lock, through its
 * write door, with the compare-and-set every compaction uses (a summary made
 * for a pointer that moved is dropped, and prepared again after that turn).
 *
 * One summary per session across instances: the preparation is claimed in
 * the database first. A claim whose holder stopped heartbeating (killed, or
 * frozen) is taken over by the next instance that asks; the late holder's
 * summary is then refused, as it no longer holds the claim. Within one
 * process, one flight per session.
 */
import { CairnError, describeError } from '../errors.js';
import type {
  PreparedCompactionRow,
  PreparedCompactionStore,
  SessionStore,
} from '../store/store.js';
import type { CompactResult, DefaultCompaction, SummaryDraft } from './default-compaction.js';
import type { TurnWrites } from '../runtime/turn-writes.js';

export interface BackgroundCompactionDeps {
  store: PreparedCompactionStore & Pick<SessionStore, 'findSession'>;
  compaction: Pick<DefaultCompaction, 'draft' | 'land'>;
  /** This process's id in `instances`: the holder of the claims it takes. */
  instanceId: string;
  /** A holder whose heartbeat is older than this is gone (the heartbeat's own limit). */
  staleAfterMs: number;
  logger?: { warn(details: Record<string, unknown>, message: string): void };
}

/** What a turn that lands a prepared summary offers: its session as read and its write port. */
export interface LandingTurn {
  readonly session: { readonly id: string };
  readonly runningTask?: string;
  readonly writes: Pick<TurnWrites, 'landCompaction' | 'emit' | 'dropPreparation'>;
}

/** A session's preparation as `GET /sessions/:id/context` shows it. */
export interface PreparedSummaryView {
  /** `preparing`: being computed; `ready`: lands at the next turn's start; `outdated`: made for a pointer that moved, dropped at the next turn. */
  status: 'preparing' | 'ready' | 'outdated';
  /** The instance that computes (or computed) it. */
  holder: string;
  /** The session's compacted size it was made for. */
  forSize: number;
  claimedAt: string;
  /** Messages it folds, and its length; null while it is computed. */
  messages: number | null;
  summaryChars: number | null;
  readyAt: string | null;
}

function draftOf(row: PreparedCompactionRow): SummaryDraft | undefined {
  if (row.summary === null) return undefined;
  return {
    sessionId: row.session_id,
    expectedSize: row.expected_size,
    expectedEpoch: row.expected_epoch,
    messages: row.messages ?? 0,
    toSize: row.to_size ?? row.expected_size,
    toSeq: row.to_seq ?? 0,
    summary: row.summary,
    model: row.model ?? '',
    inputChars: row.input_chars ?? 0,
    inputTokens: row.input_tokens ?? 0,
    outputTokens: row.output_tokens ?? 0,
    dropped: row.dropped ?? [],
  };
}

export class BackgroundCompaction {
  /** This process's preparation for each session, while it runs. */
  private readonly flights = new Map<string, Promise<void>>();
  /** Sessions this process prepared a summary for that no turn has landed yet. */
  private readonly prepared = new Set<string>();

  constructor(private readonly deps: BackgroundCompactionDeps) {}

  /**
   * Starts preparing `sessionId`'s next summary unless this process already
   * is; returns at once. Another instance holding the claim makes it a no-op.
   */
  prepare(sessionId: string): void {
    if (this.flights.has(sessionId)) return;
    const flight = this.prepareNow(sessionId).finally(() => this.flights.delete(sessionId));
    this.flights.set(sessionId, flight);
  }

  /** The preparation this process runs for `sessionId`, if any (settles, never rejects). */
  pending(sessionId: string): Promise<void> | undefined {
    return this.flights.get(sessionId);
  }

  /** True when this process prepared (or prepares) a summary for `sessionId` that has not landed. */
  expects(sessionId: string): boolean {
    return this.prepared.has(sessionId) || this.flights.has(sessionId);
  }

  /**
   * Lands the session's prepared summary, if one is ready, through the
   * turn's write port; a summary for a pointer that moved is dropped. Undefined
   * when nothing landed.
   */
  async land(turn: LandingTurn): Promise<CompactResult | undefined> {
    const { store, compaction } = this.deps;
    const sessionId = turn.session.id;
    const row = await store.findPreparation(sessionId);
    const draft = row && draftOf(row);
    if (!row || !draft) return undefined;
    this.prepared.delete(sessionId);
    const drop = () => turn.writes.dropPreparation(row.holder);
    try {
      const landed = await compaction.land(draft, {
        trigger: 'background',
        door: turn.writes,
        ...(turn.runningTask !== undefined ? { runningTask: turn.runningTask } : {}),
      });
      await drop();
      return landed;
    } catch (err) {
      if (!(err instanceof CairnError && err.code === 'COMPACTION_CONFLICT')) throw err;
      // Made for a pointer that moved (a manual compaction, a reset): prepared again after this turn.
      await drop();
      return undefined;
    }
  }

  /** The session's preparation, for display; null when there is none. */
  async describe(session: {
    id: string;
    compact_size: number;
    epoch: number;
  }): Promise<PreparedSummaryView | null> {
    const row = await this.deps.store.findPreparation(session.id);
    if (!row) return null;
    const current =
      row.expected_size === session.compact_size && row.expected_epoch === session.epoch;
    return {
      status: !current ? 'outdated' : row.summary === null ? 'preparing' : 'ready',
      holder: row.holder,
      forSize: row.expected_size,
      claimedAt: row.claimed_at,
      messages: row.messages,
      summaryChars: row.summary?.length ?? null,
      readyAt: row.ready_at,
    };
  }

  /** Waits for this process's preparations to settle (shutdown). */
  async drain(): Promise<void> {
    await Promise.all([...this.flights.values()]);
  }

  private async prepareNow(sessionId: string): Promise<void> {
    const { store, compaction, instanceId } = this.deps;
    let claimed = false;
    try {
      const session = await store.findSession(sessionId);
      if (!session || session.status === 'closed') return;
      claimed = await store.claimPreparation({
        sessionId,
        holder: instanceId,
        expectedSize: session.compact_size,
        expectedEpoch: session.epoch,
        staleAfterMs: this.deps.staleAfterMs,
      });
      if (!claimed) return;
      const draft = await compaction.draft(session, { trigger: 'background' });
      if (!('summary' in draft)) {
        await store.dropPreparation(sessionId, instanceId);
        return;
      }
      // Refused when a peer took the claim over meanwhile (this instance
      // looked dead) or the pointer moved: the summary is not kept.
      // The draft's reservation ends once it is stored or refused: the key
      // is charged when the summary lands, like any compaction's.
      const stored = await store
        .finishPreparation({ ...draft, holder: instanceId })
        .finally(() => draft.reservation?.release());
      if (stored) this.prepared.add(sessionId);
    } catch (err) {
      if (claimed) await store.dropPreparation(sessionId, instanceId).catch(() => undefined);
      this.deps.logger?.warn(
        { sessionId, error: describeError(err) },
        'preparing a summary in the background failed',
      );
    }
  }
}
