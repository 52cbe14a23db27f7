/**
 * Day-two session routes: `PATCH /sessions/:id` (title,
 * compactCount), `GET /sessions/:id/export` (NDJSON, streamed) and
 * `POST /sessions/import` (the same NDJSON, read as it arrives).
 */
import { Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import { CairnError } from '../../errors.js';
import type { CompactionStore, MessageLog, SessionStore } from '../../store/store.js';
import { requireSession } from '../../store/session-not-found.js';
import { exportSessionLines } from '../../transfer/session-export.js';
import { importSession, ndjsonLines } from '../../transfer/session-import.js';
import { objectSchema, sessionParams } from '../schemas.js';
import type { Access } from '../access.js';
import type { EventBus } from '../../runtime/event-bus.js';
import { auditBy, ownerOf, principalOf } from '../principal.js';
import type { KeyShares } from '../key-shares.js';

export const NDJSON = 'application/x-ndjson';

/**
 * Imports read at once; more wait their turn, their bodies unread (so held
 * by the socket, not in memory). Each holds at most one line of
 * IMPORT_MAX_LINE_BYTES and its parse: parallel imports of huge lines stay
 * within a fixed amount of memory.
 */
export const MAX_CONCURRENT_IMPORTS = 2;

/** A key's share of the import slots when its limits name none: one, so one key never holds them all. */
export const DEFAULT_KEY_IMPORTS = 1;

/** A counting semaphore: `run` waits for one of `size` slots. */
class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(size: number) {
    this.free = size;
  }

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free -= 1;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free += 1;
    }
  }
}

interface EditBody {
  title?: string | null;
  compactCount?: number;
}

export interface SessionTransferRoutesOptions {
  store: SessionStore & MessageLog & CompactionStore;
  agents: AgentRegistry;
  access: Pick<Access, 'agent'>;
  events: Pick<EventBus, 'emit'>;
  /** Each key's share of the import slots (limits.maxImports). */
  shares?: Pick<KeyShares, 'take'>;
}

export const sessionTransferRoutes: FastifyPluginAsync<SessionTransferRoutesOptions> = async (
  app,
  deps,
) => {
  const { store, agents, access } = deps;
  type WithId = { Params: { id: string } };

  const getSession = async (id: string) => requireSession(await store.findSession(id), id);

  app.patch<WithId & { Body: EditBody }>(
    '/sessions/:id',
    {
      schema: {
        params: sessionParams,
        body: {
          ...objectSchema({
            title: { type: ['string', 'null'], maxLength: 500 },
            compactCount: { type: 'number', minimum: 1, maximum: 99 },
          }),
          minProperties: 1,
        },
      },
    },
    async (request) => {
      await getSession(request.params.id);
      const { title, compactCount } = request.body;
      const session = requireSession(
        await store.updateSession(request.params.id, {
          ...(title !== undefined ? { title } : {}),
          ...(compactCount !== undefined ? { compactCount } : {}),
        }),
        request.params.id,
      );
      return { session };
    },
  );

  app.get<WithId>(
    '/sessions/:id/export',
    { schema: { params: sessionParams } },
    async (request, reply) => {
      const session = await getSession(request.params.id);
      void reply
        .type(NDJSON)
        .header('content-disposition', `attachment; filename="${session.id}.ndjson"`);
      return reply.send(Readable.from(exportSessionLines(store, session)));
    },
  );

  // The import body is read as a stream, line by line, so its size is not
  // bounded by server.bodyLimitBytes (each line is; see IMPORT_MAX_LINE_BYTES).
  app.addContentTypeParser(NDJSON, (_request, payload, done) => done(null, payload));

  const imports = new Slots(MAX_CONCURRENT_IMPORTS);
  app.post('/sessions/import', async (request, reply) => {
    const body = request.body;
    if (!(body instanceof Readable)) {
      throw new CairnError(
        'VALIDATION_ERROR',
        `Send the export as the body with content-type ${NDJSON} (the output of GET /sessions/:id/export).`,
      );
    }
    const principal = principalOf(request);
    // A key's imports, reading or waiting, count against its share before a slot.
    let releaseShare: () => void;
    try {
      releaseShare = deps.shares?.take(principal, 'maxImports') ?? (() => undefined);
    } catch (err) {
      body.resume();
      throw err;
    }
    const session = await imports
      .run(async () => {
        try {
          return await importSession(
            store,
            ndjsonLines(body.iterator({ destroyOnReturn: false })),
            (name) => {
              access.agent(principal, name);
              agents.get(name);
            },
            ownerOf(principal),
          );
        } catch (err) {
          // The rest of a refused body is read and dropped, not kept and not
          // left unread: the socket stays usable and the client reads the error.
          body.resume();
          throw err;
        }
      })
      .finally(releaseShare);
    await deps.events.emit('session.imported', session.id, {
      agentName: session.agent_name,
      by: auditBy(principal),
    });
    return reply.code(201).send({ session });
  });
};
