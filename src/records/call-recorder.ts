/**
 * Every model call on the record. `CallRecorder.instrument` wraps any
 * `ModelClient` (whatever its provider) so each call of a session is stored
 * with what it sent, what came back, its tokens, latency and cost. A call
 * is only noted while the model loop runs. A turn's calls are encoded
 * against the previous request (request-delta.ts) and written with the
 * message they produced, in that append's own write (`takeFor`); what is left
 * when the turn ends is written then (the engine awaits `flush`, so a turn's
 * cost and records are stored before its reply is sent). Calls outside a turn
 * (titles, manual compactions) are written a moment later. With records off,
 * only the session's cost is kept.
 */
import { randomUUID } from 'node:crypto';
import { CairnError } from '../errors.js';
import type { ModelPricing } from '../config/settings.js';
import {
  decorateModel,
  type ModelClient,
  type ModelRequest,
  type ModelResponse,
} from '../llm/model-client.js';
import type { CallRecordStore, ModelCallRole, NewModelCall } from '../store/store.js';
import { callCost } from './pricing.js';
import { encodeRequest, type RequestState } from './request-delta.js';

/** Sessions whose last request the encoder remembers (least recently used go first). */
export const REMEMBERED_SESSIONS = 512;
/**
 * A remembered request older than this is not built on: the next call starts
 * a new chain and rewrites its blobs (if missing), so a chain or blob that
 * pruning removed (records.keepDays is at least a day) is never referred to.
 */
export const REMEMBERED_REQUEST_MS = 60 * 60 * 1000;

export interface RecordedRole {
  /** The provider's name as recorded (`openai`, `anthropic`, `offline`). */
  provider: string;
  pricing?: ModelPricing | null;
}

export interface CallRecorderOptions {
  store: Pick<CallRecordStore, 'appendModelCalls' | 'addSessionCost'>;
  /** `records.enabled`: false keeps only the sessions' cost. */
  enabled: boolean;
  warn: (details: Record<string, unknown>, message: string) => void;
}

/** A call as noted on the turn; encoded and written later. */
interface NotedCall {
  id: string;
  sessionId: string;
  turnSeq: number | null;
  role: ModelCallRole;
  provider: string;
  model: string;
  createdAt: string;
  latencyMs: number;
  request: ModelRequest;
  /** The provider's exact body, when it reported one. */
  sent: Readonly<Record<string, unknown>> | undefined;
  response: ModelResponse | undefined;
  cost: number | null;
  error: { code: string; message: string } | null;
  recalledSeqs: readonly number[] | undefined;
}

const ROLE_OF_PURPOSE: Record<ModelRequest['purpose'], ModelCallRole> = {
  chat: 'main',
  summary: 'compact',
  title: 'title',
};

let lastIdMs = 0;
let idCounter = 0;

/** Ids that sort in creation order within a process (the page order's tie-break). */
function newCallId(): string {
  const ms = Date.now();
  idCounter = ms === lastIdMs ? idCounter + 1 : 0;
  lastIdMs = ms;
  // 48 random bits from a v4 UUID's first twelve hex digits (all random), drawn from
  // node's pooled entropy: a randomBytes call per model call costs more.
  const random = randomUUID();
  return `call_${ms.toString(36).padStart(9, '0')}${idCounter.toString(36).padStart(4, '0')}${random.slice(0, 8)}${random.slice(9, 13)}`;
}

/** Cairn's own request, for a provider that does not report the body it sent. */
function cairnRequest(request: ModelRequest, model: string): Record<string, unknown> {
  return {
    model,
    messages: request.messages,
    ...(request.tools?.length ? { tools: request.tools } : {}),
    ...(request.temperature !== undefined ? { temperature: request.temperature } : {}),
    ...(request.maxTokens !== undefined ? { max_tokens: request.maxTokens } : {}),
  };
}

function describeFailure(err: unknown, signal?: AbortSignal): { code: string; message: string } {
  if (err instanceof CairnError) return { code: err.code, message: err.message };
  if (signal?.aborted) return { code: 'CANCELLED', message: 'The call was cancelled.' };
  return { code: 'INTERNAL', message: 'The model call failed unexpectedly.' };
}

export class CallRecorder {
  private noted: NotedCall[] = [];
  private scheduled = false;
  private writing: Promise<void> = Promise.resolve();
  /** The last request per session and role, for the delta of the next one. */
  private readonly states = new Map<string, { state: RequestState; at: number }>();

  constructor(private readonly options: CallRecorderOptions) {}

  /** `client` with every call of a session recorded under `role`'s provider and priced by its pricing. */
  instrument(client: ModelClient, role: RecordedRole): ModelClient {
    const note = (call: NotedCall): void => this.note(call);
    return decorateModel(client, async (request, options = {}) => {
      const createdAt = new Date().toISOString();
      const started = performance.now();
      let sent: Readonly<Record<string, unknown>> | undefined;
      const outer = options.onRequestSent;
      const scope = options.scope;
      const base = {
        id: newCallId(),
        sessionId: scope?.sessionId ?? '',
        turnSeq: scope?.turnSeq ?? null,
        role: ROLE_OF_PURPOSE[request.purpose],
        provider: role.provider,
        model: request.model ?? client.model,
        createdAt,
        request,
        recalledSeqs: options.recalledSeqs,
      };
      let response: ModelResponse;
      try {
        response = await client.complete(request, {
          ...options,
          onRequestSent: (body) => {
            sent = body;
            outer?.(body);
          },
        });
      } catch (err) {
        if (scope) {
          note({
            ...base,
            latencyMs: performance.now() - started,
            sent,
            response: undefined,
            cost: null,
            error: describeFailure(err, options.signal),
          });
        }
        throw err;
      }
      const cost = callCost(response.usage, role.pricing);
      if (scope)
        note({
          ...base,
          latencyMs: performance.now() - started,
          sent,
          response,
          cost,
          error: null,
        });
      return { ...response, cost };
    });
  }

  /**
   * An embedding call (the `embed` role) of `sessionId`, priced by the
   * role's pricing and written a moment later with the session's other
   * calls: the messages it embedded are in `request.input`. Returns its cost.
   */
  noteEmbedding(call: {
    sessionId: string;
    provider: string;
    model: string;
    createdAt: string;
    latencyMs: number;
    request: Readonly<Record<string, unknown>>;
    tokens: number | null;
    pricing: ModelPricing | null;
    error: { code: string; message: string } | null;
  }): number | null {
    const usage =
      call.tokens === null ? null : { prompt_tokens: call.tokens, completion_tokens: 0 };
    const cost = callCost(usage, call.pricing);
    this.note({
      id: newCallId(),
      sessionId: call.sessionId,
      turnSeq: null,
      role: 'embed',
      provider: call.provider,
      model: call.model,
      createdAt: call.createdAt,
      latencyMs: call.latencyMs,
      request: { messages: [], purpose: 'chat' },
      sent: call.request,
      response:
        call.error === null
          ? {
              message: { role: 'assistant', content: null },
              finishReason: 'stop',
              usage,
              model: call.model,
            }
          : undefined,
      cost,
      error: call.error,
      recalledSeqs: undefined,
    });
    return cost;
  }

  /** Resolves once every call noted so far is written (or given up). */
  async flush(): Promise<void> {
    this.scheduled = false;
    const batch = this.noted;
    this.noted = [];
    if (batch.length > 0) this.writing = this.writing.then(() => this.write(batch));
    await this.writing;
  }

  /**
   * The calls noted for `sessionId`, encoded, for the caller to write in its
   * own write (a turn's reply: the reply and its call commit together).
   * `settle(false)` when that write failed: the calls are noted again and
   * written on their own, encoded anew (what was not written must not be
   * built on). Undefined with records off (only the cost is kept, at flush)
   * or nothing noted. A session's turns run one at a time, so the call its
   * next one builds on is one that was written.
   */
  takeFor(
    sessionId: string,
  ): { calls: NewModelCall[]; settle: (written: boolean) => void } | undefined {
    if (!this.options.enabled) return undefined;
    const taken = this.noted.filter((call) => call.sessionId === sessionId);
    if (taken.length === 0) return undefined;
    this.noted = this.noted.filter((call) => call.sessionId !== sessionId);
    return {
      calls: taken.map((call) => this.encode(call)),
      settle: (written) => {
        if (written) return;
        this.states.clear();
        this.noted.push(...taken);
      },
    };
  }

  private note(call: NotedCall): void {
    this.noted.push(call);
    // A turn's calls go with its next append (`takeFor`), or when it ends
    // (the engine awaits `flush` then): never in a write of their own beside
    // the reply's, where the two would compete for the database.
    if (call.turnSeq !== null || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      if (this.scheduled) void this.flush();
    });
  }

  private async write(batch: readonly NotedCall[]): Promise<void> {
    try {
      if (!this.options.enabled) {
        const costs = new Map<string, number>();
        for (const call of batch)
          if (call.cost) costs.set(call.sessionId, (costs.get(call.sessionId) ?? 0) + call.cost);
        for (const [sessionId, cost] of costs)
          await this.options.store.addSessionCost(sessionId, cost);
        return;
      }
      await this.options.store.appendModelCalls(batch.map((call) => this.encode(call)));
    } catch (err) {
      // What was not written must not be built on.
      this.states.clear();
      // A record is worth less than the turn: log it and go on.
      this.options.warn(
        { calls: batch.length, error: err instanceof Error ? err.message : String(err) },
        'model-call records could not be written',
      );
    }
  }

  private encode(call: NotedCall): NewModelCall {
    const key = `${call.sessionId}\u0000${call.role}`;
    const remembered = this.states.get(key);
    const previous =
      remembered && Date.now() - remembered.at <= REMEMBERED_REQUEST_MS
        ? remembered.state
        : undefined;
    const body = call.sent ?? cairnRequest(call.request, call.model);
    const encoded = encodeRequest(call.id, body, previous);
    this.states.delete(key);
    this.states.set(key, { state: encoded.next, at: Date.now() });
    if (this.states.size > REMEMBERED_SESSIONS) {
      const oldest = this.states.keys().next().value;
      if (oldest !== undefined) this.states.delete(oldest);
    }
    const response = call.response;
    const usage = response?.usage ?? null;
    return {
      id: call.id,
      session_id: call.sessionId,
      turn_seq: call.turnSeq,
      role: call.role,
      provider: call.provider,
      model: call.model,
      response_model: response?.model ?? null,
      created_at: call.createdAt,
      latency_ms: Math.round(call.latencyMs * 100) / 100,
      input_tokens: usage?.prompt_tokens ?? null,
      output_tokens: usage?.completion_tokens ?? null,
      cached_tokens: usage?.cache_read_tokens ?? null,
      cost: call.cost,
      finish_reason: response?.finishReason ?? null,
      response: response
        ? {
            content: response.message.content,
            ...(response.message.tool_calls?.length
              ? { tool_calls: response.message.tool_calls }
              : {}),
          }
        : null,
      error: call.error,
      fallback_hops: response?.fallbackHops?.length ? [...response.fallbackHops] : null,
      recalled_seqs: call.recalledSeqs ? [...call.recalledSeqs] : null,
      wire: call.sent !== undefined,
      params_ref: encoded.paramsRef,
      chain_id: encoded.chainId,
      base_call_id: encoded.baseCallId,
      base_keep: encoded.baseKeep,
      message_refs: encoded.messageRefs,
      blobs: encoded.blobs,
    };
  }
}
