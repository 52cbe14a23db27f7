/**
 * Automatic session titles (agent `autoTitle`): after the first exchange of
 * an untitled chat session, one short call on the compact model role names
 * it. It runs in the background and never fails or delays the turn; a
 * failure is logged and leaves the session untitled.
 */
import type { ModelClient, ModelRequest } from '../llm/model-client.js';
import type { SessionRow, Store } from '../store/store.js';
import { callReserved, claimedTokens, responseTokens, type Budget } from './budget.js';

export const TITLE_PROMPT =
  'Write a title of at most six words for the conversation below. Reply with the title only: no quotes, no punctuation at the end.';
/** Longest stored title; a longer reply is cut. */
export const MAX_TITLE_CHARS = 80;
/** The model sees at most this much of each message: a title needs the gist only. */
const MAX_EXCERPT_CHARS = 2_000;

export interface SessionTitlerDeps {
  store: Pick<Store, 'findSession' | 'updateSession' | 'listMessageMeta'>;
  /** The compact role's model. */
  model: ModelClient;
  /** The session owner's token budget: a title reserves its call like a turn does. */
  budget?: Budget;
  warn?: (details: Record<string, unknown>, message: string) => void;
}

export class SessionTitler {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly deps: SessionTitlerDeps) {}

  /**
   * Starts titling `session` if the turn whose user message has `userSeq`
   * was its first exchange; returns at once.
   */
  titleLater(
    session: Pick<SessionRow, 'id' | 'owner_key'>,
    userSeq: number,
    userText: string,
    reply: string,
  ): void {
    const sessionId = session.id;
    const run = this.title(session, userSeq, userText, reply).catch((err: unknown) =>
      this.deps.warn?.(
        { sessionId, err: err instanceof Error ? err.message : String(err) },
        'automatic session title failed; the session stays untitled',
      ),
    );
    this.running.add(run);
    void run.finally(() => this.running.delete(run));
  }

  /** Resolves once every title started so far is written or given up (shutdown, tests). */
  async idle(): Promise<void> {
    await Promise.all([...this.running]);
  }

  private async title(
    { id: sessionId, owner_key: ownerKey }: Pick<SessionRow, 'id' | 'owner_key'>,
    userSeq: number,
    userText: string,
    reply: string,
  ): Promise<void> {
    // Only the first exchange names a session (system messages do not count).
    const earlier = await this.deps.store.listMessageMeta(sessionId, 0);
    if (earlier.some((message) => message.seq < userSeq)) return;
    const request: ModelRequest = {
      purpose: 'title',
      maxTokens: 30,
      messages: [
        { role: 'system', content: TITLE_PROMPT },
        {
          role: 'user',
          content: `User: ${userText.slice(0, MAX_EXCERPT_CHARS)}\n\nAssistant: ${reply.slice(0, MAX_EXCERPT_CHARS)}`,
        },
      ],
    };
    // A key out of budget gets no title: the refusal is logged like any failure.
    const reservation = await this.deps.budget?.reserve(ownerKey, claimedTokens(request, 0));
    const response = await callReserved(reservation, () =>
      this.deps.model.complete(request, { scope: { sessionId } }),
    );
    // No write records a title's usage: the reservation charges it to the key.
    await reservation?.charge(responseTokens(response));
    const title = cleanTitle(response.message.content ?? '');
    if (title === '') return;
    // A title set meanwhile (PATCH /sessions/:id) wins over the generated one.
    const session = await this.deps.store.findSession(sessionId);
    if (!session || session.title !== null) return;
    await this.deps.store.updateSession(sessionId, { title });
  }
}

/** The first line, without surrounding quotes or a final full stop, at most MAX_TITLE_CHARS. */
export function cleanTitle(raw: string): string {
  const line = raw.trim().split('\n')[0] ?? '';
  return line
    .replace(/^["'`*\s]+|["'`*\s]+$/g, '')
    .replace(/[.!]+$/, '')
    .slice(0, MAX_TITLE_CHARS)
    .trim();
}
