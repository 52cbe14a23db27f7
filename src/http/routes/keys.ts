/**
 * Client keys over HTTP (admin only, by the ownership table): create (the
 * secret is in this one answer and nowhere else), list, read, revoke.
 * Creating and revoking are audit events.
 */
import type { FastifyInstance } from 'fastify';
import { CairnError } from '../../errors.js';
import type { EventBus } from '../../runtime/event-bus.js';
import type { KeyAgents, KeyLimits, KeyStore } from '../../store/store.js';
import type { ClientKeys } from '../client-keys.js';
import { auditBy, principalOf } from '../principal.js';
import { AGENT_NAME, objectSchema } from '../schemas.js';

const KEY_ID = { type: 'string', pattern: '^key_[A-Za-z0-9]{1,64}$' } as const;
const keyParams = objectSchema({ id: KEY_ID }, ['id']);
const LIMIT_VALUE = { type: 'integer', minimum: 1, maximum: 1_000_000_000_000 } as const;

interface CreateKeyBody {
  name: string;
  agents?: KeyAgents;
  limits?: KeyLimits;
}

function keyNotFound(id: string): CairnError {
  return new CairnError('KEY_NOT_FOUND', `Key "${id}" not found. List keys with GET /keys.`);
}

export function keyRoutes(
  app: FastifyInstance,
  deps: {
    keys: Pick<ClientKeys, 'create'>;
    store: Pick<KeyStore, 'findKey' | 'listKeys' | 'revokeKey'>;
    events: Pick<EventBus, 'emit'>;
  },
): void {
  type WithId = { Params: { id: string } };

  app.post<{ Body: CreateKeyBody }>(
    '/keys',
    {
      schema: {
        body: objectSchema(
          {
            name: { type: 'string', minLength: 1, maxLength: 100, pattern: '\\S' },
            agents: {
              anyOf: [
                { const: '*' },
                { type: 'array', items: AGENT_NAME, maxItems: 1000, uniqueItems: true },
              ],
            },
            limits: objectSchema({ requestsPerMinute: LIMIT_VALUE, tokensPerDay: LIMIT_VALUE }),
          },
          ['name'],
        ),
      },
    },
    async (request, reply) => {
      const { name, agents = '*', limits = {} } = request.body;
      const created = await deps.keys.create({ name, agents, limits });
      await deps.events.emit('key.created', null, {
        keyId: created.key.id,
        name,
        agents,
        limits,
        by: auditBy(principalOf(request)),
      });
      return reply.code(201).send(created);
    },
  );

  app.get('/keys', async () => ({ keys: await deps.store.listKeys() }));

  app.get<WithId>('/keys/:id', { schema: { params: keyParams } }, async (request) => {
    const key = await deps.store.findKey(request.params.id);
    if (!key) throw keyNotFound(request.params.id);
    return { key };
  });

  app.delete<WithId>('/keys/:id', { schema: { params: keyParams } }, async (request) => {
    const before = await deps.store.findKey(request.params.id);
    if (!before) throw keyNotFound(request.params.id);
    const key = (await deps.store.revokeKey(before.id)) ?? before;
    if (before.revoked_at === null) {
      await deps.events.emit('key.revoked', null, {
        keyId: key.id,
        name: key.name,
        by: auditBy(principalOf(request)),
      });
    }
    return { key };
  });
}
