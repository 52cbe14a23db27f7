/**
 * GET /events: the event log as server-sent events. `id:` is the event id; a
 * client reconnecting with `Last-Event-ID` gets everything after it, then the
 * live feed, with no gap and no duplicate.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { EventRow } from '../../store/store.js';
import type { EventBus } from '../../runtime/event-bus.js';
import type { EventLog, SessionStore } from '../../store/store.js';
import { principalOf } from '../principal.js';
import { objectSchema, SESSION_ID } from '../schemas.js';
import { SseStream } from '../sse.js';
import type { StreamGate } from '../stream-gate.js';

const REPLAY_PAGE = 500;
/** Sessions whose owner one client stream remembers; past this it forgets and asks again. */
const OWNER_CACHE_SIZE = 10_000;
export const SSE_KEEPALIVE_MS = 15_000;

export interface EventRoutesOptions {
  store: Pick<EventLog, 'listEvents'> & Pick<SessionStore, 'findSession'>;
  events: EventBus;
  streams: StreamGate;
}

/** True when `event` revokes the key `keyId`. */
function revokes(event: EventRow, keyId: string): boolean {
  return event.type === 'key.revoked' && event.data['keyId'] === keyId;
}

export const eventRoutes: FastifyPluginAsync<EventRoutesOptions> = async (app, deps) => {
  // An event stream is never idle, so shutdown ends them; clients reconnect
  // elsewhere with Last-Event-ID and miss nothing.
  const open = new Set<SseStream>();
  app.addHook('preClose', async () => {
    for (const stream of open) stream.end();
  });

  app.get<{ Querystring: { sessionId?: string; lastEventId?: number } }>(
    '/events',
    {
      schema: {
        querystring: objectSchema({
          sessionId: SESSION_ID,
          lastEventId: { type: 'integer', minimum: 0 },
        }),
        headers: {
          type: 'object',
          properties: { 'last-event-id': { type: 'string', pattern: '^[0-9]{1,15}$' } },
        },
      },
    },
    async (request, reply) => {
      const { sessionId } = request.query;
      const header = request.headers['last-event-id'];
      let lastId = typeof header === 'string' ? Number(header) : (request.query.lastEventId ?? 0);
      const sse = new SseStream(reply, deps.streams);
      open.add(sse);
      const matches = (e: EventRow): boolean =>
        sessionId === undefined || e.session_id === sessionId;

      // A client key sees the events of its own sessions only (never those
      // without a session: key and agent changes are the admin's).
      const principal = principalOf(request);
      const ownerKey = principal.kind === 'client' ? principal.key.id : undefined;
      const owned = new Map<string, boolean>();
      const visible = async (e: EventRow): Promise<boolean> => {
        if (ownerKey === undefined) return true;
        if (e.session_id === null) return false;
        let known = owned.get(e.session_id);
        if (known === undefined) {
          known = (await deps.store.findSession(e.session_id))?.owner_key === ownerKey;
          if (owned.size >= OWNER_CACHE_SIZE) owned.clear();
          owned.set(e.session_id, known);
        }
        return known;
      };
      // Sent one after another, in id order, whatever each ownership check waits for.
      let order: Promise<void> = Promise.resolve();
      const forward = (e: EventRow): Promise<void> => {
        order = order
          .then(async () => {
            if (await visible(e)) sse.send(e.type, e.data, e.id);
          })
          .catch(() => undefined);
        return order;
      };

      // Subscribe first and buffer, so nothing emitted during the replay is lost.
      let buffer: EventRow[] | undefined = [];
      const subscription = deps.events.subscribe((event) => {
        if (ownerKey !== undefined && revokes(event, ownerKey)) {
          // Revoked on any instance: the stream ends, nothing more is delivered.
          sse.send('error', {
            error: {
              code: 'UNAUTHORIZED',
              message:
                'This key was revoked: the stream has ended. Ask the admin for a new key (POST /keys).',
            },
          });
          sse.end();
          return;
        }
        if (sse.isClosed || !matches(event)) return;
        if (buffer) buffer.push(event);
        else if (event.id > lastId) {
          lastId = event.id;
          void forward(event);
        }
      });
      const keepalive = setInterval(() => sse.comment('keepalive'), SSE_KEEPALIVE_MS);
      request.raw.on('close', () => {
        clearInterval(keepalive);
        subscription.close();
        open.delete(sse);
      });
      // What the live feed will not carry is history, read from the store below.
      await subscription.live;

      // Instances sharing a database commit events out of id order; the replay
      // stops where the live feed has not yet delivered everything below.
      let horizonReached = false;
      for (;;) {
        const horizon = deps.events.replayHorizon();
        const page = await deps.store.listEvents({
          afterId: lastId,
          limit: REPLAY_PAGE,
          ...(sessionId ? { sessionId } : {}),
          ...(ownerKey !== undefined ? { ownerKey } : {}),
        });
        for (const event of page) {
          if (event.id > horizon) {
            horizonReached = true;
            break;
          }
          // The store filtered the replay by owner already.
          if (event.session_id !== null) owned.set(event.session_id, true);
          await forward(event);
          lastId = event.id;
          // A long replay goes at the client's pace, never ahead of it.
          await sse.drained();
        }
        if (horizonReached || page.length < REPLAY_PAGE || sse.isClosed) break;
      }
      const pending = buffer;
      buffer = undefined;
      for (const event of pending) {
        if (event.id <= lastId) continue;
        lastId = event.id;
        void forward(event);
      }
      return reply;
    },
  );
};
