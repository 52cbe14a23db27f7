/**
 * Chat requests whose turn failed after their `200` went out: a streamed
 * chat reports its failure as an `error` event, so the status alone would
 * count the turn as ok. The chat route marks them; the turn metrics read it.
 */
import type { FastifyRequest } from 'fastify';

const failedAfterHeaders = new WeakSet<FastifyRequest>();

export function markTurnFailed(request: FastifyRequest): void {
  failedAfterHeaders.add(request);
}

/** `ok` or `error`, by status, or by the mark for a turn that failed after its 200. */
export function turnOutcome(request: FastifyRequest, statusCode: number): 'ok' | 'error' {
  return statusCode < 400 && !failedAfterHeaders.has(request) ? 'ok' : 'error';
}
