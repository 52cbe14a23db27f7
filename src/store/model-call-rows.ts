/**
 * What both dialects share for model-call records (migration 010): the
 * columns a listing selects, the row → contract conversion, and the rebuild
 * of a call's request from its chain of deltas and the session's blobs. SQL
 * stays with each dialect; nothing here touches a database.
 */
import { CairnError } from '../errors.js';
import type { FallbackHop } from '../llm/model-client.js';
import { newestFirstPage } from './decisions.js';
import type { ModelCallRecord, ModelCallSummary, NewModelCall, Page } from './store.js';

/** Everything a listing returns (the request refs stay behind). */
export const MODEL_CALL_SUMMARY_COLUMNS = `id, session_id, turn_seq, role, provider, model,
  response_model, created_at, latency_ms, input_tokens, output_tokens, cached_tokens, cost,
  finish_reason, response, error_code, error, fallback_hops, recalled_seqs`;

/**
 * A model_calls row as selected with MODEL_CALL_SUMMARY_COLUMNS: the
 * summary's columns, with what the summary parses kept as JSON text and the
 * error as its code and message.
 */
export type ModelCallSummaryRecord = Omit<
  ModelCallSummary,
  'response' | 'error' | 'fallback_hops' | 'recalled_seqs'
> & {
  response: string | null;
  error_code: string | null;
  error: string | null;
  fallback_hops: string | null;
  recalled_seqs: string | null;
};

/** A call found by id: its summary and the chain it is stored in. */
export type FoundCallRecord = ModelCallSummaryRecord & { chain_id: string };

/** What the rebuild reads of each call of a chain. */
export interface ChainLinkRecord {
  id: string;
  base_call_id: string | null;
  base_keep: number;
  message_refs: string;
  params_ref: string;
  wire: number;
}

export const CHAIN_LINK_COLUMNS = 'id, base_call_id, base_keep, message_refs, params_ref, wire';

function parseOrNull<T>(text: string | null): T | null {
  return text === null ? null : (JSON.parse(text) as T);
}

export function toModelCallSummary(row: ModelCallSummaryRecord): ModelCallSummary {
  return {
    id: row.id,
    session_id: row.session_id,
    turn_seq: row.turn_seq === null ? null : Number(row.turn_seq),
    role: row.role,
    provider: row.provider,
    model: row.model,
    response_model: row.response_model,
    created_at: row.created_at,
    latency_ms: row.latency_ms,
    input_tokens: row.input_tokens === null ? null : Number(row.input_tokens),
    output_tokens: row.output_tokens === null ? null : Number(row.output_tokens),
    cached_tokens: row.cached_tokens === null ? null : Number(row.cached_tokens),
    cost: row.cost,
    finish_reason: row.finish_reason,
    response: parseOrNull<ModelCallSummary['response']>(row.response),
    error:
      row.error_code === null
        ? null
        : { code: row.error_code, message: row.error ?? row.error_code },
    fallback_hops: parseOrNull<FallbackHop[]>(row.fallback_hops),
    recalled_seqs: parseOrNull<number[]>(row.recalled_seqs),
  };
}

/** A newest-first page of summary rows (one more than `limit` read), as the contract's page. */
export function toModelCallPage(
  rows: readonly ModelCallSummaryRecord[],
  limit: number,
): Page<ModelCallSummary> {
  const page = newestFirstPage(rows, limit);
  return { ...page, items: page.items.map(toModelCallSummary) };
}

/** The column values of a new call, in the order of MODEL_CALL_INSERT_COLUMNS. */
export const MODEL_CALL_INSERT_COLUMNS = [
  'id',
  'session_id',
  'turn_seq',
  'role',
  'provider',
  'model',
  'response_model',
  'created_at',
  'latency_ms',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cost',
  'finish_reason',
  'response',
  'error_code',
  'error',
  'fallback_hops',
  'recalled_seqs',
  'wire',
  'params_ref',
  'chain_id',
  'base_call_id',
  'base_keep',
  'message_refs',
] as const;

export function modelCallValues(call: NewModelCall): unknown[] {
  const json = (value: unknown): string | null => (value === null ? null : JSON.stringify(value));
  return [
    call.id,
    call.session_id,
    call.turn_seq,
    call.role,
    call.provider,
    call.model,
    call.response_model,
    call.created_at,
    call.latency_ms,
    call.input_tokens,
    call.output_tokens,
    call.cached_tokens,
    call.cost,
    call.finish_reason,
    json(call.response),
    call.error?.code ?? null,
    call.error?.message ?? null,
    json(call.fallback_hops),
    json(call.recalled_seqs),
    call.wire ? 1 : 0,
    call.params_ref,
    call.chain_id,
    call.base_call_id,
    call.base_keep,
    JSON.stringify(call.message_refs),
  ];
}

/** The refs of `targetId`'s request, folded forward from its chain's checkpoint. */
export function chainRefs(
  targetId: string,
  links: readonly ChainLinkRecord[],
): { refs: string[]; link: ChainLinkRecord } {
  const byId = new Map(links.map((link) => [link.id, link]));
  const path: ChainLinkRecord[] = [];
  for (let link = byId.get(targetId); link;) {
    path.push(link);
    if (link.base_call_id === null) break;
    link = byId.get(link.base_call_id);
    if (!link) throw brokenChain(targetId);
  }
  const target = path[0];
  if (!target || path[path.length - 1]!.base_call_id !== null) throw brokenChain(targetId);
  let refs: string[] = [];
  for (const link of path.reverse()) {
    refs = [...refs.slice(0, link.base_keep), ...(JSON.parse(link.message_refs) as string[])];
  }
  return { refs, link: target };
}

function brokenChain(id: string): CairnError {
  return new CairnError(
    'INTERNAL',
    `The record of model call "${id}" cannot be rebuilt: a call it is stored against is missing.`,
  );
}

/**
 * The request as sent: the parameters blob (the body with `messages` null in
 * its place, so the key order is the sent one) with the messages put back.
 */
export function rebuildRequest(
  paramsBody: string,
  refs: readonly string[],
  blobs: ReadonlyMap<string, string>,
): Record<string, unknown> {
  const request = JSON.parse(paramsBody) as Record<string, unknown>;
  request.messages = refs.map((ref) => {
    const body = blobs.get(ref);
    if (body === undefined) throw brokenChain(ref);
    return JSON.parse(body) as unknown;
  });
  return request;
}

/** The blob hashes a call's request is rebuilt from: its messages' and its parameters'. */
export function wantedBlobs(chain: { refs: readonly string[]; link: ChainLinkRecord }): string[] {
  return [...new Set([...chain.refs, chain.link.params_ref])];
}

/** The call found by id, its request rebuilt from its chain (`chainRefs`) and the blobs read. */
export function toModelCallRecord(
  row: FoundCallRecord,
  chain: { refs: readonly string[]; link: ChainLinkRecord },
  blobs: ReadonlyMap<string, string>,
): ModelCallRecord {
  const request = rebuildRequest(blobs.get(chain.link.params_ref) ?? '{}', chain.refs, blobs);
  const { chain_id: _chain, ...summary } = row;
  return { ...toModelCallSummary(summary), request, wire: chain.link.wire === 1 };
}
