/**
 * `cairn keys create|list|revoke`: client keys on a running server (the
 * admin key, CAIRN_API_KEY, is what the CLI sends). `create` prints the
 * secret once; the server keeps only its hash.
 */
import { CliUsageError, request, type ClientOptions } from './client.js';

interface KeyView {
  id: string;
  name: string;
  agents: '*' | string[];
  limits: { requestsPerMinute?: number; tokensPerDay?: number };
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

/** A key as `GET /keys` lists it: with what it spent. */
interface KeyWithSpend extends KeyView {
  cost: number;
  tokens_today: number;
}

/** A positive whole number given on the command line, or a usage error naming the option. */
function positiveInt(value: string | undefined, option: string): number | undefined {
  if (value === undefined) return undefined;
  if (!/^[1-9][0-9]*$/.test(value))
    throw new CliUsageError(`${option} must be a positive whole number, not "${value}".`);
  return Number(value);
}

export async function createKey(
  name: string,
  options: ClientOptions & { agents?: string; rpm?: string; tokensPerDay?: string },
): Promise<void> {
  const agents =
    options.agents === undefined || options.agents === '*'
      ? '*'
      : options.agents
          .split(',')
          .map((agent) => agent.trim())
          .filter((agent) => agent !== '');
  const requestsPerMinute = positiveInt(options.rpm, '--rpm');
  const tokensPerDay = positiveInt(options.tokensPerDay, '--tokens-per-day');
  const body = (await request(options, 'POST', '/keys', {
    name,
    agents,
    limits: {
      ...(requestsPerMinute !== undefined ? { requestsPerMinute } : {}),
      ...(tokensPerDay !== undefined ? { tokensPerDay } : {}),
    },
  })) as { key: KeyView; secret: string };
  console.log(`created ${body.key.id} (${body.key.name})`);
  console.log(`secret (shown once, store it now): ${body.secret}`);
}

export async function listKeys(options: ClientOptions): Promise<void> {
  const { keys } = (await request(options, 'GET', '/keys')) as { keys: KeyWithSpend[] };
  if (keys.length === 0) return console.log('no keys');
  for (const key of keys) {
    const limits = [
      key.limits.requestsPerMinute !== undefined ? `${key.limits.requestsPerMinute}/min` : '',
      key.limits.tokensPerDay !== undefined ? `${key.limits.tokensPerDay} tokens/day` : '',
    ]
      .filter(Boolean)
      .join(', ');
    console.log(
      [
        key.id,
        key.name.padEnd(20),
        (key.agents === '*' ? '*' : key.agents.join(',')).padEnd(20),
        (limits || 'no limits').padEnd(24),
        `cost ${key.cost}, ${key.tokens_today} tokens today`.padEnd(32),
        key.revoked_at ? `revoked ${key.revoked_at}` : `last used ${key.last_used_at ?? 'never'}`,
      ].join('  '),
    );
  }
}

export async function revokeKey(id: string, options: ClientOptions): Promise<void> {
  const { key } = (await request(options, 'DELETE', `/keys/${encodeURIComponent(id)}`)) as {
    key: KeyView;
  };
  console.log(`revoked ${key.id} (${key.name}) at ${key.revoked_at ?? ''}`);
}
