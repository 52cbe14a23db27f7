/**
 * Client keys over HTTP (admin only, by the ownership table): create (the
 * secret is in this one answer and nowhere else), list, read, revoke.
 * Creating and revoking are audit events. Reading a key says what it spent:
 * `cost`, the sum of the costs of the sessions it owns, and `tokens_today`,
 * its tokens of the UTC day (what `limits.tokensPerDay` is checked against).
 */
import type { FastifyPluginAsync } from 'fastify';
import { CairnError } from '../../errors.js';
import type { EventBus } from '../../runtime/event-bus.js';
import { usageDay } from '../../store/records.js';
import type { KeyAgents, KeyLimits, KeyRow, KeySpend, KeyStore } from '../../store/store.js';
import type { ClientKeys } from '../client-keys.js';
import { auditBy, principalOf } from '../principal.js';
import { AGENT_NAME, objectSchema } from '../schemas.js';

const KEY_ID = { type: 'string', pattern: '^key_[A-Za-z0-9]{1,64}$' } as const;
const keyParams = objectSchema({ id: KEY_ID }, ['id']);
const LIMIT_VALUE = { type: 'integer', minimum: 1, maximum: 1_000_000_000_000 } as const;
/** Every limit a key may have: requests and tokens, and its shares of this instance (docs/guide/09-security.md). */
const LIMIT_NAMES = [
  'requestsPerMinute',
  'tokensPerDay',
  'maxStreams',
  'maxImports',
  'maxTurns',
] as const;
const LIMITS = objectSchema(Object.fromEntries(LIMIT_NAMES.map((name) => [name, LIMIT_VALUE])));
/** A PATCH's limits: a number sets a limit, null removes it (back to its default), absent keeps it. */
const LIMITS_CHANGE = objectSchema(
  Object.fromEntries(LIMIT_NAMES.map((name) => [name, { anyOf: [LIMIT_VALUE, { type: 'null' }] }])),
);

type LimitsChange = { [K in keyof KeyLimits]?: number | null };

interface CreateKeyBody {
  name: string;
  agents?: KeyAgents;
  limits?: KeyLimits;
}

function keyNotFound(id: string): CairnError {
  return new CairnError('KEY_NOT_FOUND', `Key "${id}" not found. List keys with GET /keys.`);
}

const NOTHING_SPENT: KeySpend = { cost: 0, tokens: 0 };

function withSpend(key: KeyRow, spend: KeySpend = NOTHING_SPENT) {
  return { ...key, cost: spend.cost, tokens_today: spend.tokens };
}

export interface KeyRoutesOptions {
  keys: Pick<ClientKeys, 'create'>;
  store: Pick<
    KeyStore,
    'findKey' | 'listKeys' | 'revokeKey' | 'setKeyLimits' | 'keySpend' | 'listKeySpend'
  >;
  events: Pick<EventBus, 'emit'>;
}

export const keyRoutes: FastifyPluginAsync<KeyRoutesOptions> = async (app, deps) => {
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
            limits: LIMITS,
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

  app.get('/keys', async () => {
    const day = usageDay();
    const [keys, spend] = await Promise.all([deps.store.listKeys(), deps.store.listKeySpend(day)]);
    return { keys: keys.map((key) => withSpend(key, spend.get(key.id))) };
  });

  app.get<WithId>('/keys/:id', { schema: { params: keyParams } }, async (request) => {
    const key = await deps.store.findKey(request.params.id);
    if (!key) throw keyNotFound(request.params.id);
    return { key: withSpend(key, await deps.store.keySpend(key.id, usageDay())) };
  });

  app.patch<WithId & { Body: { limits: LimitsChange } }>(
    '/keys/:id',
    {
      schema: {
        summary: "Change a key's limits; its secret stays the same",
        params: keyParams,
        body: objectSchema({ limits: LIMITS_CHANGE }, ['limits']),
      },
    },
    async (request) => {
      const before = await deps.store.findKey(request.params.id);
      if (!before) throw keyNotFound(request.params.id);
      const limits: KeyLimits = { ...before.limits };
      for (const [name, value] of Object.entries(request.body.limits)) {
        const limit = name as keyof KeyLimits;
        if (value === null) delete limits[limit];
        else if (value !== undefined) limits[limit] = value;
      }
      const key = (await deps.store.setKeyLimits(before.id, limits)) ?? before;
      await deps.events.emit('key.updated', null, {
        keyId: key.id,
        name: key.name,
        limits,
        by: auditBy(principalOf(request)),
      });
      return { key: withSpend(key, await deps.store.keySpend(key.id, usageDay())) };
    },
  );

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
};
