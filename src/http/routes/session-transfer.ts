/**
 * Day-two session routes: `PATCH /sessions/:id` (title,
 * compactCount), `GET /sessions/:id/export` (NDJSON, streamed) and
 * `POST /sessions/import` (the same NDJSON, read as it arrives).
 */
import { Readable } from 'node:stream';
import type { FastifyPluginAsync } from 'fastify';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import { CairnError } from '../../errors.js';
import type { CompactionStore, MessageLog, SessionStore, VectorStore } from '../../store/store.js';
import { requireSession } from '../../store/session-not-found.js';
import { exportSessionLines } from '../../transfer/session-export.js';
import { importSession, ndjsonLines } from '../../transfer/session-import.js';
import { objectSchema, sessionParams } from '../schemas.js';
import type { Access } from '../access.js';
import type { EventBus } from '../../runtime/event-bus.js';
import { auditBy, ownerOf, principalOf } from '../principal.js';
import type { KeyShares } from '../key-shares.js';
import { nextUtcMidnight } from '../key-limits.js';
import type { Principal } from '../principal.js';
import { usageDay } from '../../store/records.js';

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

/**
 * What each client key imported on this instance today (UTC), against
 * `server.importDayBytes`. Kept in memory: a restart, or another instance,
 * starts from nothing (the per-request cap still holds everywhere).
 */
export class ImportAllowance {
  private day = '';
  private readonly used = new Map<string, number>();

  constructor(
    private readonly maxBytesPerDay: number,
    private readonly now: () => number = Date.now,
  ) {}

  private today(): Map<string, number> {
    const day = usageDay(new Date(this.now()).toISOString());
    if (day !== this.day) {
      this.day = day;
      this.used.clear();
    }
    return this.used;
  }

  /** Adds `bytes` to the key's day; 429 KEY_LIMIT once the day's allowance is used up. The admin has none. */
  take(principal: Principal, bytes: number): void {
    if (principal.kind !== 'client') return;
    const used = this.today();
    const total = (used.get(principal.key.id) ?? 0) + bytes;
    used.set(principal.key.id, total);
    if (total <= this.maxBytesPerDay && (bytes > 0 || total < this.maxBytesPerDay)) return;
    const resets = nextUtcMidnight(new Date(this.now()));
    throw new CairnError(
      'KEY_LIMIT',
      `Key "${principal.key.name}" imported ${Math.min(total, this.maxBytesPerDay)} of its ${this.maxBytesPerDay} bytes for today (server.importDayBytes); nothing of this import was kept. The allowance resets at ${resets.toISOString()}.`,
      { retryAfterSeconds: Math.max(1, Math.ceil((resets.getTime() - this.now()) / 1000)) },
    );
  }
}

/** Passes `chunks` on, counting their bytes with `count` (which may throw to stop the import). */
async function* counted(
  chunks: AsyncIterable<string | Uint8Array>,
  count: (bytes: number) => void,
): AsyncGenerator<string | Uint8Array> {
  for await (const chunk of chunks) {
    count(typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length);
    yield chunk;
  }
}

interface EditBody {
  title?: string | null;
  compactCount?: number;
}

export interface SessionTransferRoutesOptions {
  store: SessionStore & MessageLog & CompactionStore & VectorStore;
  agents: AgentRegistry;
  access: Pick<Access, 'agent'>;
  events: Pick<EventBus, 'emit'>;
  /** Each key's share of the import slots (limits.maxImports). */
  shares?: Pick<KeyShares, 'take'>;
  /** Bytes one import may send (server.importMaxBytes). */
  importMaxBytes?: number;
  /** What each key may import per day (server.importDayBytes). */
  importAllowance?: Pick<ImportAllowance, 'take'>;
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
  const maxBytes = deps.importMaxBytes ?? Number.POSITIVE_INFINITY;
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
      // A key whose day is used up is refused before it holds a slot.
      deps.importAllowance?.take(principal, 0);
      releaseShare = deps.shares?.take(principal, 'maxImports') ?? (() => undefined);
    } catch (err) {
      body.resume();
      throw err;
    }
    let received = 0;
    const countBytes = (bytes: number): void => {
      received += bytes;
      if (received > maxBytes) {
        throw new CairnError(
          'PAYLOAD_TOO_LARGE',
          `This import is over ${maxBytes} bytes (server.importMaxBytes); nothing of it was kept. Import a shorter session, or ask the operator to raise server.importMaxBytes.`,
        );
      }
      deps.importAllowance?.take(principal, bytes);
    };
    const session = await imports
      .run(async () => {
        try {
          return await importSession(
            store,
            ndjsonLines(counted(body.iterator({ destroyOnReturn: false }), countBytes)),
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
