/**
 * The client keys part of the Postgres store (`KeyStore`, see the SQLite
 * twin), and the statement that charges a session's tokens to its owner key.
 */
import type pg from 'pg';
import type {
  KeyLimits,
  KeyRow,
  KeySpend,
  KeyStore,
  NewKey,
  TokenReservationInput,
  TokenReservationResult,
} from '../store.js';
import { newId, now, toKeyRow, usageDay, type KeyRecord } from '../records.js';
import type { Queryable } from './open-pool.js';

/**
 * The upsert that adds `tokens` to the day's usage of the owner key of each
 * row of `owners` (a table expression with an `owner_key` column).
 */
export function chargeOwnersSql(owners: string, day: string, tokens: string): string {
  return `INSERT INTO key_usage (key_id, day, tokens)
     SELECT owner_key, ${day}, ${tokens} FROM ${owners} WHERE owner_key IS NOT NULL
     ON CONFLICT (key_id, day) DO UPDATE SET tokens = key_usage.tokens + EXCLUDED.tokens`;
}

/** Adds `tokens` to the day's usage of the session's owner key, inside the caller's transaction. */
export async function chargeSessionTokens(
  c: Queryable,
  sessionId: string,
  tokens: number,
): Promise<void> {
  if (tokens <= 0) return;
  await c.query(
    chargeOwnersSql('(SELECT owner_key FROM sessions WHERE id = $1) AS owner', '$2', '$3'),
    [sessionId, usageDay(), tokens],
  );
}

type Rows = <R extends pg.QueryResultRow>(sql: string, params?: unknown[]) => Promise<R[]>;

export class PgKeys implements KeyStore {
  constructor(private readonly rows: Rows) {}

  private async one(sql: string, params: unknown[]): Promise<KeyRow | undefined> {
    const [row] = await this.rows<KeyRecord>(sql, params);
    return row && toKeyRow(row);
  }

  async createKey(input: NewKey): Promise<KeyRow> {
    const row = await this.one(
      `INSERT INTO keys (id, name, agents, limits, secret_hash, created_at)
       VALUES ($1, $2, $3, $4, $5, $6) RETURNING *`,
      [
        newId('key'),
        input.name,
        JSON.stringify(input.agents),
        JSON.stringify(input.limits),
        input.secretHash,
        now(),
      ],
    );
    return row!;
  }

  findKey(id: string): Promise<KeyRow | undefined> {
    return this.one('SELECT * FROM keys WHERE id = $1', [id]);
  }

  async findKeyBySecretHash(
    secretHash: string,
  ): Promise<(KeyRow & { secret_hash: string }) | undefined> {
    const [row] = await this.rows<KeyRecord>(
      'SELECT * FROM keys WHERE secret_hash = $1 AND revoked_at IS NULL',
      [secretHash],
    );
    return row && { ...toKeyRow(row), secret_hash: row.secret_hash };
  }

  async listKeys(): Promise<KeyRow[]> {
    const rows = await this.rows<KeyRecord>('SELECT * FROM keys ORDER BY created_at DESC, id DESC');
    return rows.map(toKeyRow);
  }

  revokeKey(id: string): Promise<KeyRow | undefined> {
    return this.one(
      'UPDATE keys SET revoked_at = COALESCE(revoked_at, $2) WHERE id = $1 RETURNING *',
      [id, now()],
    );
  }

  setKeyLimits(id: string, limits: KeyLimits): Promise<KeyRow | undefined> {
    return this.one('UPDATE keys SET limits = $2 WHERE id = $1 RETURNING *', [
      id,
      JSON.stringify(limits),
    ]);
  }

  async touchKey(id: string, at: string): Promise<void> {
    await this.rows('UPDATE keys SET last_used_at = $2 WHERE id = $1', [id, at]);
  }

  async keyTokensOn(keyId: string, day: string): Promise<number> {
    const [row] = await this.rows<{ tokens: number }>(
      'SELECT tokens FROM key_usage WHERE key_id = $1 AND day = $2',
      [keyId, day],
    );
    return row?.tokens ?? 0;
  }

  async keySpend(keyId: string, day: string): Promise<KeySpend> {
    // Both sums read by index: sessions_by_owner_key, and key_usage's primary key.
    const [row] = await this.rows<KeySpend>(
      `SELECT
         (SELECT COALESCE(SUM(cost), 0) FROM sessions WHERE owner_key = $1) AS cost,
         (SELECT COALESCE(SUM(tokens), 0) FROM key_usage WHERE key_id = $1 AND day = $2) AS tokens`,
      [keyId, day],
    );
    return { cost: Number(row!.cost), tokens: Number(row!.tokens) };
  }

  async listKeySpend(day: string): Promise<Map<string, KeySpend>> {
    const rows = await this.rows<KeySpend & { key_id: string }>(
      `SELECT k.id AS key_id, COALESCE(s.cost, 0) AS cost, COALESCE(u.tokens, 0) AS tokens
       FROM keys k
       LEFT JOIN (SELECT owner_key, SUM(cost) AS cost FROM sessions
                  WHERE owner_key IS NOT NULL GROUP BY owner_key) s ON s.owner_key = k.id
       LEFT JOIN key_usage u ON u.key_id = k.id AND u.day = $1`,
      [day],
    );
    return new Map(rows.map((r) => [r.key_id, { cost: Number(r.cost), tokens: Number(r.tokens) }]));
  }

  async reserveKeyTokens(input: TokenReservationInput): Promise<TokenReservationResult> {
    // One round trip: the function locks the key's row, then sums and inserts (migration 022).
    const [row] = await this.rows<{
      key_name: string | null;
      max_tokens: string | null;
      spent: string;
      held: string;
      reserved: boolean;
    }>('SELECT * FROM cairn_reserve_tokens($1, $2, $3, $4, $5, $6, $7)', [
      input.id,
      input.keyId,
      input.day,
      input.tokens,
      input.holder.self,
      input.holder.staleAfterMs,
      now(),
    ]);
    return {
      ...(row?.key_name != null ? { keyName: row.key_name } : {}),
      ...(row?.max_tokens != null ? { max: Number(row.max_tokens) } : {}),
      spent: Number(row?.spent ?? 0),
      held: Number(row?.held ?? 0),
      reserved: row?.reserved ?? false,
    };
  }

  async settleReservation(id: string, tokens: number): Promise<void> {
    await this.rows('UPDATE budget_reservations SET tokens = $2 WHERE id = $1', [id, tokens]);
  }

  async releaseReservation(id: string): Promise<void> {
    await this.rows('DELETE FROM budget_reservations WHERE id = $1', [id]);
  }

  async chargeReservation(id: string, tokens: number): Promise<void> {
    // One statement: the delete hands its key and day to the charge.
    await this.rows(
      `WITH gone AS (DELETE FROM budget_reservations WHERE id = $1 RETURNING key_id, day)
       INSERT INTO key_usage (key_id, day, tokens)
       SELECT key_id, day, $2::bigint FROM gone WHERE $2::bigint > 0
       ON CONFLICT (key_id, day) DO UPDATE SET tokens = key_usage.tokens + EXCLUDED.tokens`,
      [id, tokens],
    );
  }
}
