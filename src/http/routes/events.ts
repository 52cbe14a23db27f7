/**
 * GET /events: the event log as server-sent events. `id:` is the event id; a
 * client reconnecting with `Last-Event-ID` gets everything after it, then the
 * live feed, with no gap and no duplicate.
 */
import type { FastifyInstance } from 'fastify';
import type { EventRow } from '../../store/store.js';
import type { EventBus } from '../../runtime/event-bus.js';
import type { EventLog } from '../../store/store.js';
import { objectSchema, SESSION_ID } from '../schemas.js';
import { SseStream } from '../sse.js';
import type { StreamGate } from '../stream-gate.js';

const REPLAY_PAGE = 500;
export const SSE_KEEPALIVE_MS = 15_000;

export function eventRoutes(
  app: FastifyInstance,
  deps: { store: Pick<EventLog, 'listEvents'>; events: EventBus; streams: StreamGate },
): void {
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

      // Subscribe first and buffer, so nothing emitted during the replay is lost.
      let buffer: EventRow[] | undefined = [];
      const unsubscribe = deps.events.subscribe((event) => {
        if (!matches(event)) return;
        if (buffer) buffer.push(event);
        else if (event.id > lastId) {
          lastId = event.id;
          sse.send(event.type, event.data, event.id);
        }
      });
      const keepalive = setInterval(() => sse.comment('keepalive'), SSE_KEEPALIVE_MS);
      request.raw.on('close', () => {
        clearInterval(keepalive);
        unsubscribe();
        open.delete(sse);
      });

      // Instances sharing a database commit events out of id order; the replay
      // stops where the live feed has not yet delivered everything below.
      let horizonReached = false;
      for (;;) {
        const horizon = deps.events.replayHorizon();
        const page = await deps.store.listEvents({
          afterId: lastId,
          limit: REPLAY_PAGE,
          ...(sessionId ? { sessionId } : {}),
        });
        for (const event of page) {
          if (event.id > horizon) {
            horizonReached = true;
            break;
          }
          sse.send(event.type, event.data, event.id);
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
        sse.send(event.type, event.data, event.id);
      }
      return reply;
    },
  );
}
