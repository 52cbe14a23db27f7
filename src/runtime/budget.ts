/**
 * The budget port: a model call of a key's session reserves the tokens it may
 * spend before it starts and settles after, so calls running at the same time
 * (on this instance or another sharing the database) cannot together spend
 * past the key's `tokensPerDay`. A check alone let twenty parallel chats each
 * see an unspent day and spend ten times it.
 *
 * Every caller of a model on a key's behalf goes through `Budget.reserve`:
 * the turn loop, compaction's summary, the session title, and any later
 * caller (embeddings, background summaries). The implementation lives in
 * `coordination/key-reservations.ts`; the runtime sees only this interface.
 */
import { CairnError } from '../errors.js';
import type { ModelRequest, ModelResponse } from '../llm/model-client.js';
import { estimateMessagesTokens, estimateTextTokens } from '../llm/tokens.js';

/** One call's claim on a key's budget, held until the call's usage is charged. */
export interface Reservation {
  /** The tokens claimed. */
  readonly tokens: number;
  /**
   * Holds the tokens the call really used in place of its estimate, until
   * `release`: for usage the caller's next write charges (a turn's message, a
   * landed compaction).
   */
  settle(tokens: number): Promise<void>;
  /** Ends the claim: its usage was charged by the write that recorded it, or the call failed. */
  release(): Promise<void>;
  /** Charges `tokens` to the key's day and ends the claim, in one step: for usage no other write charges. */
  charge(tokens: number): Promise<void>;
}

export interface Budget {
  /**
   * Reserves `tokens` against every limit of `keyId` before a model call;
   * throws 429 BUDGET_EXCEEDED, naming the limit, when what is left cannot
   * cover them. Undefined when nothing limits the key (the admin's `null`, or
   * a key with no `tokensPerDay`): there is nothing to settle then.
   */
  reserve(keyId: string | null, tokens: number): Promise<Reservation | undefined>;
}

/** The budget of a server whose keys have no token limits to hold (tests, tools). */
export const UNLIMITED_BUDGET: Budget = { reserve: () => Promise.resolve(undefined) };

/**
 * The tokens a call claims: Cairn's estimate of its prompt (messages and tool
 * schemas) plus the output it asks for (`maxTokens`, else the role's default;
 * 0 where the provider is sent no maximum).
 */
export function claimedTokens(request: ModelRequest, defaultOutputTokens: number): number {
  const tools = request.tools?.length ? estimateTextTokens(JSON.stringify(request.tools)) : 0;
  return (
    estimateMessagesTokens(request.messages) + tools + (request.maxTokens ?? defaultOutputTokens)
  );
}

/** Every token a response reports (prompt and completion). */
export function responseTokens(response: Pick<ModelResponse, 'usage'>): number {
  return (response.usage?.prompt_tokens ?? 0) + (response.usage?.completion_tokens ?? 0);
}

/**
 * Runs `call` under `reservation`, released when it throws (an abort too), so
 * a failed call holds nothing; when it answers, settled to the real usage if
 * that exceeds the claim. A smaller real usage keeps the larger claim until
 * the caller charges or releases it, moments later: never less than the call
 * spent, and one statement fewer per call. The caller ends the reservation.
 */
export async function callReserved(
  reservation: Reservation | undefined,
  call: () => Promise<ModelResponse>,
): Promise<ModelResponse> {
  let response: ModelResponse;
  try {
    response = await call();
  } catch (err) {
    await reservation?.release();
    throw err;
  }
  await settleOverrun(reservation, response);
  return response;
}

/** Settles `reservation` to the response's usage when that exceeds the claim (see callReserved). */
export async function settleOverrun(
  reservation: Reservation | undefined,
  response: Pick<ModelResponse, 'usage'>,
): Promise<void> {
  const used = responseTokens(response);
  if (reservation && used > reservation.tokens) await reservation.settle(used);
}

/** The next UTC midnight after `at`: when a day's token budget resets. */
export function nextUtcMidnight(at: Date): Date {
  return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate() + 1));
}

/** What a key's day looks like when a call is refused. */
export interface DayBudget {
  keyName: string;
  max: number;
  spent: number;
  /** Tokens reserved by calls running now (0 when only the spent tokens were checked). */
  held: number;
  /** What the refused call needed (0: any call is refused, the day is spent). */
  needed: number;
}

/** 429 BUDGET_EXCEEDED for a key's `tokensPerDay`, with the seconds until it resets. */
export function dayBudgetExceeded(day: DayBudget, now: Date): CairnError {
  const resets = nextUtcMidnight(now);
  const { keyName, max, spent, held, needed } = day;
  const message =
    spent >= max || needed === 0
      ? `Key "${keyName}" spent ${spent} of its ${max} tokens for today (tokensPerDay); the budget resets at ${resets.toISOString()}.`
      : `Key "${keyName}" has ${Math.max(0, max - spent - held)} of its ${max} tokens for today left (tokensPerDay: ${spent} spent, ${held} reserved by calls running now); the next model call needs ${needed}. The budget resets at ${resets.toISOString()}.`;
  return new CairnError('BUDGET_EXCEEDED', message, {
    retryAfterSeconds: (resets.getTime() - now.getTime()) / 1000,
  });
}
