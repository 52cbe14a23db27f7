/** Session resources: create, list, read, messages, fork, reset, close, delete. */
import type { FastifyPluginAsync } from 'fastify';
import type { Sessions } from '../../runtime/sessions.js';
import type { MessageLog, SessionFilter, SessionStore } from '../../store/store.js';
import {
  AGENT_NAME,
  CURSOR,
  LIMIT,
  NO_OPTIONS_BODY,
  objectSchema,
  sessionParams,
  SESSION_ID,
} from '../schemas.js';
import { auditBy, END_USER_MAX_CHARS, ownerOf, principalOf } from '../principal.js';

/** How much of a session's first user message the list carries (`first_user_message`). */
export const FIRST_USER_MESSAGE_MAX_CHARS = 200;

interface CreateBody {
  agentName: string;
  title?: string;
  compactCount?: number;
}

export interface SessionRoutesOptions {
  sessions: Pick<Sessions, 'create' | 'get' | 'reset' | 'close' | 'delete' | 'fork'>;
  store: Pick<SessionStore, 'listSessions'> &
    Pick<MessageLog, 'listMessages' | 'firstUserMessages'>;
}

export const sessionRoutes: FastifyPluginAsync<SessionRoutesOptions> = async (app, deps) => {
  const { sessions, store } = deps;
  type WithId = { Params: { id: string } };

  app.post<{ Body: CreateBody }>(
    '/sessions',
    {
      schema: {
        body: objectSchema(
          {
            agentName: AGENT_NAME,
            title: { type: 'string', maxLength: 500 },
            compactCount: { type: 'number', minimum: 1, maximum: 99 },
          },
          ['agentName'],
        ),
      },
    },
    async (request, reply) => {
      const { agentName, title, compactCount } = request.body;
      const session = await sessions.create({
        agentName,
        owner: ownerOf(principalOf(request)),
        ...(title !== undefined ? { title } : {}),
        ...(compactCount !== undefined ? { compactCount } : {}),
      });
      return reply.code(201).send({ session });
    },
  );

  app.get<{ Querystring: Omit<SessionFilter, 'ownerKey' | 'endUser'> & { user?: string } }>(
    '/sessions',
    {
      schema: {
        querystring: objectSchema({
          agentName: AGENT_NAME,
          status: { type: 'string', enum: ['active', 'closed'] },
          mode: { type: 'string', enum: ['chat', 'task', 'subagent', 'daemon'] },
          parentSessionId: SESSION_ID,
          user: { type: 'string', minLength: 1, maxLength: END_USER_MAX_CHARS },
          limit: LIMIT,
          cursor: CURSOR,
        }),
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const { user, ...filter } = request.query;
      const page = await store.listSessions({
        ...filter,
        ...(user !== undefined ? { endUser: user } : {}),
        ...(principal.kind === 'client' ? { ownerKey: principal.key.id } : {}),
      });
      // An untitled session is known by how it began: its first user message, cut short.
      const firsts = await store.firstUserMessages(
        page.items.map((s) => s.id),
        FIRST_USER_MESSAGE_MAX_CHARS,
      );
      return {
        sessions: page.items.map((s) => ({ ...s, first_user_message: firsts.get(s.id) ?? null })),
        nextCursor: page.nextCursor,
      };
    },
  );

  app.get<WithId>('/sessions/:id', { schema: { params: sessionParams } }, async (request) => ({
    session: await sessions.get(request.params.id),
  }));

  app.get<WithId & { Querystring: { afterSeq: number; limit: number } }>(
    '/sessions/:id/messages',
    {
      schema: {
        params: sessionParams,
        querystring: objectSchema({
          afterSeq: { type: 'integer', minimum: 0, default: 0 },
          limit: { type: 'integer', minimum: 1, maximum: 1000, default: 100 },
        }),
      },
    },
    async (request) => {
      const session = await sessions.get(request.params.id);
      const messages = await store.listMessages(session.id, request.query);
      return {
        messages: messages.map((m) => ({
          ...m,
          compacted: m.role !== 'system' && m.seq <= session.compact_seq,
        })),
      };
    },
  );

  app.post<WithId & { Body: { atSeq?: number } | undefined }>(
    '/sessions/:id/fork',
    {
      schema: {
        params: sessionParams,
        body: {
          ...objectSchema({ atSeq: { type: 'integer', minimum: 1 } }),
          type: ['object', 'null'],
        },
      },
    },
    async (request, reply) => {
      const session = await sessions.fork(request.params.id, request.body?.atSeq);
      return reply.code(201).send({
        session,
        forkedFrom: { sessionId: request.params.id, atSeq: session.last_seq },
      });
    },
  );

  app.post<WithId>(
    '/sessions/:id/reset',
    { schema: { params: sessionParams, body: NO_OPTIONS_BODY } },
    async (request) => ({
      session: await sessions.reset(request.params.id, auditBy(principalOf(request))),
    }),
  );

  app.post<WithId>(
    '/sessions/:id/close',
    { schema: { params: sessionParams, body: NO_OPTIONS_BODY } },
    async (request) => ({
      session: await sessions.close(request.params.id),
    }),
  );

  app.delete<WithId>(
    '/sessions/:id',
    { schema: { params: sessionParams, body: NO_OPTIONS_BODY } },
    async (request, reply) => {
      await sessions.delete(request.params.id, auditBy(principalOf(request)));
      return reply.code(204).send();
    },
  );
};
