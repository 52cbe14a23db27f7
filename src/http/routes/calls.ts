/**
 * Model-call records: `GET /sessions/:id/calls` (keyset pages, newest first,
 * `?role=`) and `GET /calls/:id` (the request as sent, byte for byte). A call
 * is visible exactly when its session is: both routes pass through
 * `readableSession`, the session routes' own check.
 */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { CairnError } from '../../errors.js';
import type { Access } from '../access.js';
import { principalOf } from '../principal.js';
import type { CallRecordStore, ModelCallRole } from '../../store/store.js';
import { CURSOR, LIMIT, objectSchema, sessionParams } from '../schemas.js';

export const CALL_ID = { type: 'string', pattern: '^call_[A-Za-z0-9]{1,64}$' } as const;

export interface CallRoutesOptions {
  access: Pick<Access, 'session'>;
  store: Pick<CallRecordStore, 'listModelCalls' | 'findModelCall'>;
  /** Waits for the calls this process noted but has not written yet (read your own writes). */
  flush: () => Promise<void>;
}

export const callRoutes: FastifyPluginAsync<CallRoutesOptions> = async (app, deps) => {
  const { access, store, flush } = deps;
  /** The one access check: a call is readable when its session is (404 otherwise). */
  const readableSession = (request: FastifyRequest, sessionId: string) =>
    access.session(principalOf(request), sessionId);

  app.get<{
    Params: { id: string };
    Querystring: { role?: ModelCallRole; limit: number; cursor?: string };
  }>(
    '/sessions/:id/calls',
    {
      schema: {
        summary: "A session's model-call records, newest first",
        description:
          'Keyset pages (pass nextCursor back as cursor), optionally one role. Each record: tokens, latency, cost, response, error, fallback hops, recalled seqs; GET /calls/:id adds the request as sent.',
        params: sessionParams,
        querystring: objectSchema({
          role: { type: 'string', enum: ['main', 'compact', 'title', 'embed'] },
          limit: LIMIT,
          cursor: CURSOR,
        }),
      },
    },
    async (request) => {
      const session = await readableSession(request, request.params.id);
      await flush();
      const { role, limit, cursor } = request.query;
      const page = await store.listModelCalls(session.id, {
        limit,
        ...(role !== undefined ? { role } : {}),
        ...(cursor !== undefined ? { cursor } : {}),
      });
      return { calls: page.items, nextCursor: page.nextCursor };
    },
  );

  app.get<{ Params: { id: string } }>(
    '/calls/:id',
    {
      schema: {
        summary: 'One model call with the request exactly as the model received it',
        description:
          'request is the body as sent (JSON.stringify(request) is the bytes on the wire when wire is true); a call of a session the caller cannot read is 404 CALL_NOT_FOUND.',
        params: objectSchema({ id: CALL_ID }, ['id']),
      },
    },
    async (request) => {
      await flush();
      const notFound = new CairnError(
        'CALL_NOT_FOUND',
        `Model call "${request.params.id}" not found. List a session's calls with GET /sessions/:id/calls.`,
      );
      const call = await store.findModelCall(request.params.id);
      if (!call) throw notFound;
      // A call of a session the caller may not read does not exist for it.
      await readableSession(request, call.session_id).catch((err: unknown) => {
        throw err instanceof CairnError && err.status === 404 ? notFound : err;
      });
      return { call };
    },
  );
};
