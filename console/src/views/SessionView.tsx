/**
 * One session, headed by its title (or how it began): the context bar,
 * compaction (preview, compact now, history, undo), the transcript with the
 * compacted prefix set apart (each message can be forked into a new
 * session), and the chat box. Follows the session's
 * events, so turns sent elsewhere appear live, and follows a new reply
 * while the reader is at the bottom.
 */
import { useRef, useState } from 'preact/hooks';
import { ContextBar } from '../components/ContextBar';
import { Transcript } from '../components/Transcript';
import type { Api } from '../lib/api';
import { useApi, useFollowBottom, useLiveEvents, useLoad } from '../lib/hooks';
import { href, navigate } from '../lib/router';
import { compactOffer, type CompactOffer } from '../lib/compact-offer';
import { callsByMessage, formatCost, type CallSummary } from '../lib/model-calls';
import { sessionHeading } from '../lib/session-list';
import type { Compaction, ContextInfo, DryRun, Message, Session } from '../lib/types';
import { ChatBox } from './ChatBox';
import { ErrorNote } from './ErrorNote';

const MESSAGE_PAGE = 1000;

async function loadMessages(api: Api, id: string): Promise<Message[]> {
  const all: Message[] = [];
  for (let afterSeq = 0; ;) {
    const { messages } = await api.get<{ messages: Message[] }>(
      `/sessions/${id}/messages?afterSeq=${afterSeq}&limit=${MESSAGE_PAGE}`,
    );
    all.push(...messages);
    if (messages.length < MESSAGE_PAGE) return all;
    afterSeq = messages[messages.length - 1]!.seq;
  }
}

/** The session's main-role calls, newest first, at most a few pages (older replies show none). */
async function loadCalls(api: Api, id: string): Promise<CallSummary[]> {
  const all: CallSummary[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < 4; page++) {
    const query: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const res: { calls: CallSummary[]; nextCursor: string | null } = await api.get(
      `/sessions/${id}/calls?role=main&limit=500${query}`,
    );
    all.push(...res.calls);
    cursor = res.nextCursor;
    if (!cursor) break;
  }
  return all;
}

interface SessionData {
  session: Session;
  messages: Message[];
  calls: CallSummary[];
  context: ContextInfo | undefined;
  compactions: Compaction[];
  /** What a compaction would do now (undefined for a closed session or an older server). */
  dryRun: DryRun | undefined;
}

export function SessionView({ id }: { id: string }) {
  const api = useApi();
  const loaded = useLoad<SessionData>(async () => {
    const [{ session, dryRun }, messages, context, { compactions }, calls] = await Promise.all([
      // The dry run never calls the model; it tells whether "Compact now" would do anything.
      api.get<{ session: Session }>(`/sessions/${id}`).then(async ({ session }) => ({
        session,
        dryRun:
          session.status === 'active'
            ? await api
                .post<DryRun>(`/sessions/${id}/compact`, { dryRun: true })
                .catch(() => undefined)
            : undefined,
      })),
      loadMessages(api, id),
      // A session whose agent is gone has no next call to describe.
      api.get<ContextInfo>(`/sessions/${id}/context`).catch(() => undefined),
      api.get<{ compactions: Compaction[] }>(`/sessions/${id}/compactions`),
      // An older server has no records: the transcript shows without them.
      loadCalls(api, id).catch(() => []),
    ]);
    return { session, messages, context, compactions, calls, dryRun };
  }, [id]);
  const live = useLiveEvents(id, loaded.reload);
  const [forkError, setForkError] = useState<string>();
  const fork = async (atSeq: number) => {
    setForkError(undefined);
    try {
      const { session } = await api.post<{ session: Session }>(`/sessions/${id}/fork`, { atSeq });
      navigate(href(`sessions/${encodeURIComponent(session.id)}`));
    } catch (err) {
      setForkError((err as Error).message);
    }
  };
  // Replies of this visit whose model calls got recalled messages (reply seq → recalled seqs).
  const [recall, setRecall] = useState<{ sessionId: string; bySeq: Map<number, number[]> }>({
    sessionId: id,
    bySeq: new Map(),
  });
  const recalled = recall.sessionId === id ? recall.bySeq : undefined;
  const data = loaded.data;
  // The page follows a new reply while the reader is at the bottom (see lib/follow-bottom).
  const page = useRef<HTMLDivElement>(null);
  useFollowBottom(page, data !== undefined);
  if (!data) {
    return (
      <section class="main">
        <ErrorNote error={loaded.error} />
        {!loaded.error && <p>Loading…</p>}
      </section>
    );
  }
  const { session } = data;
  return (
    <div class="session" ref={page}>
      <section class="main" aria-labelledby="session-title">
        <h2 id="session-title">{sessionHeading(session, data.messages)}</h2>
        <p class="meta">
          <code class="session-id">{session.id}</code> · {session.agent_name} · {session.mode} ·{' '}
          {session.status} · {session.message_count} messages ·{' '}
          {session.cost !== undefined && session.cost > 0
            ? `cost ${formatCost(session.cost)} · `
            : ''}{' '}
          <span class={`live-${live}`}>{live === 'live' ? 'live' : live}</span>
        </p>
        <ErrorNote error={loaded.error ?? forkError} />
        <Transcript
          messages={data.messages}
          compactSize={session.compact_size}
          summary={session.compact_summary}
          onFork={(seq) => void fork(seq)}
          {...(recalled ? { recalled } : {})}
          calls={{ bySeq: callsByMessage(data.messages, data.calls), api }}
        />
        <ChatBox
          agentName={session.agent_name}
          sessionId={session.id}
          disabled={session.status === 'closed'}
          onTurnEnd={(turn) => {
            if (turn) {
              const bySeq = new Map(recalled ?? []).set(turn.replySeq, turn.seqs);
              setRecall({ sessionId: id, bySeq });
            }
            loaded.reload();
          }}
        />
      </section>
      <aside class="side-panel" aria-label="Context and compaction">
        {data.context && <ContextBar context={data.context} />}
        <CompactPanel
          session={session}
          compactions={data.compactions}
          offer={compactOffer(session, data.messages, data.dryRun)}
          onChange={loaded.reload}
        />
      </aside>
    </div>
  );
}

/**
 * What a compaction's summary left out (identifiers, numbers, dates, quotes,
 * names of the folded messages), each with the message it came from; the raw
 * messages are still there, and recall can bring them back.
 */
export function Dropped({ dropped }: { dropped: Compaction['dropped'] }) {
  if (dropped === undefined || dropped === null) return null;
  if (dropped.length === 0) return <p class="dropped">Nothing dropped that Cairn could spot.</p>;
  return (
    <details class="dropped">
      <summary>
        Not in the summary: {dropped.length} {dropped.length === 1 ? 'detail' : 'details'}
      </summary>
      <ul>
        {dropped.map((item) => (
          <li key={`${item.seq}:${item.text}`}>
            <code>{item.text}</code>{' '}
            <span class="meta">
              {item.kind}, message #{item.seq}
            </span>
          </li>
        ))}
      </ul>
    </details>
  );
}

export function CompactPanel(props: {
  session: Session;
  compactions: Compaction[];
  offer: CompactOffer;
  onChange: () => void;
}) {
  const api = useApi();
  const [instructions, setInstructions] = useState('');
  const [preview, setPreview] = useState<DryRun>();
  const [note, setNote] = useState<string>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const url = `/sessions/${props.session.id}/compact`;
  const options = () => (instructions.trim() ? { instructions: instructions.trim() } : {});

  const act = async (action: () => Promise<void>) => {
    setBusy(true);
    setError(undefined);
    setNote(undefined);
    try {
      await action();
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const dryRun = () =>
    act(async () => setPreview(await api.post<DryRun>(url, { dryRun: true, ...options() })));
  const compact = () =>
    act(async () => {
      const result = await api.post<{
        compactedCount: number;
        newSize: number;
        alreadyUpToDate: boolean;
      }>(url, options());
      setPreview(undefined);
      setNote(
        result.alreadyUpToDate
          ? 'Nothing to compact: already up to date.'
          : `Compacted ${result.compactedCount} messages; the summary now covers ${result.newSize}.`,
      );
      props.onChange();
    });
  const undo = () =>
    act(async () => {
      const result = await api.post<{ restoredSize: number }>(`${url}/undo`);
      setNote(`Undone: the summary now covers ${result.restoredSize} messages.`);
      props.onChange();
    });

  return (
    <section class="compaction" aria-label="Compaction">
      <h3>Compaction</h3>
      {props.offer.kind === 'offer' ? (
        <>
          <label>
            Instructions (optional)
            <textarea
              value={instructions}
              rows={2}
              maxLength={4000}
              onInput={(e) => setInstructions(e.currentTarget.value)}
            />
          </label>
          <p class="buttons">
            <button type="button" disabled={busy} onClick={() => void dryRun()}>
              Preview
            </button>{' '}
            <button type="button" disabled={busy} onClick={() => void compact()}>
              Compact now
            </button>
          </p>
        </>
      ) : (
        <p class="nothing-to-compact">{props.offer.reason}</p>
      )}
      {preview && (
        <p class="preview" role="status">
          Preview: would compact {preview.compactedCount} messages (summary would cover{' '}
          {preview.newSize}); {preview.batchChars.toLocaleString('en-US')} of{' '}
          {preview.totalChars.toLocaleString('en-US')} characters.
        </p>
      )}
      {note && (
        <p role="status" class="note">
          {note}
        </p>
      )}
      <ErrorNote error={error} />
      <h4>History</h4>
      {props.compactions.length === 0 ? (
        <p class="no-history">No compactions yet.</p>
      ) : (
        <ol class="history">
          {props.compactions.map((c) => (
            <li key={c.id} class={c.undone_at ? 'undone' : ''}>
              {new Date(c.created_at).toLocaleString()} · {c.trigger} · {c.from_size} → {c.to_size}{' '}
              messages
              {c.undone_at ? ' · undone' : ''}
              <Dropped dropped={c.dropped} />
            </li>
          ))}
        </ol>
      )}
      {props.session.compact_size > 0 && (
        <button type="button" disabled={busy} onClick={() => void undo()}>
          Undo last compaction
        </button>
      )}
    </section>
  );
}
