/**
 * The client keys part of the SQLite store (`KeyStore`), and the statement
 * that charges a session's tokens to its owner key for the day. Kept apart
 * from the rest of the store: it shares only the connection.
 */
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
import type { SqliteDatabase } from './open-database.js';

export function prepareKeyStatements(db: SqliteDatabase) {
  return {
    insertKey: db.prepare(`INSERT INTO keys (id, name, agents, limits, secret_hash, created_at)
      VALUES (@id, @name, @agents, @limits, @secret_hash, @created_at)`),
    getKey: db.prepare<[string], KeyRecord>('SELECT * FROM keys WHERE id = ?'),
    keyBySecret: db.prepare<[string], KeyRecord>(
      'SELECT * FROM keys WHERE secret_hash = ? AND revoked_at IS NULL',
    ),
    listKeys: db.prepare<[], KeyRecord>('SELECT * FROM keys ORDER BY created_at DESC, id DESC'),
    revokeKey: db.prepare('UPDATE keys SET revoked_at = COALESCE(revoked_at, @at) WHERE id = @id'),
    touchKey: db.prepare('UPDATE keys SET last_used_at = @at WHERE id = @id'),
    setKeyLimits: db.prepare('UPDATE keys SET limits = @limits WHERE id = @id'),
    keyTokens: db.prepare<[string, string], { tokens: number }>(
      'SELECT tokens FROM key_usage WHERE key_id = ? AND day = ?',
    ),
    // Both sums read by index: sessions_by_owner_key, and key_usage's primary key.
    keySpend: db.prepare<{ key: string; day: string }, KeySpend>(`SELECT
        (SELECT COALESCE(SUM(cost), 0) FROM sessions WHERE owner_key = @key) AS cost,
        (SELECT COALESCE(SUM(tokens), 0) FROM key_usage WHERE key_id = @key AND day = @day) AS tokens`),
    listKeySpend: db.prepare<
      { day: string },
      KeySpend & { key_id: string }
    >(`SELECT k.id AS key_id, COALESCE(s.cost, 0) AS cost, COALESCE(u.tokens, 0) AS tokens
      FROM keys k
      LEFT JOIN (SELECT owner_key, SUM(cost) AS cost FROM sessions
                 WHERE owner_key IS NOT NULL GROUP BY owner_key) s ON s.owner_key = k.id
      LEFT JOIN key_usage u ON u.key_id = k.id AND u.day = @day`),
    // Charged inside the write that records the usage, to the session's owner key.
    chargeSession: db.prepare(`INSERT INTO key_usage (key_id, day, tokens)
      SELECT owner_key, @day, @tokens FROM sessions WHERE id = @id AND owner_key IS NOT NULL AND @tokens > 0
      ON CONFLICT (key_id, day) DO UPDATE SET tokens = tokens + excluded.tokens`),
    chargeKey: db.prepare(`INSERT INTO key_usage (key_id, day, tokens) VALUES (@key, @day, @tokens)
      ON CONFLICT (key_id, day) DO UPDATE SET tokens = tokens + excluded.tokens`),
    keyBudget: db.prepare<[string], { name: string; max: number | null }>(
      `SELECT name, json_extract(limits, '$.tokensPerDay') AS max FROM keys WHERE id = ?`,
    ),
    // A holder is live when it is this process, or an instance whose heartbeat is fresh.
    dropDeadReservations: db.prepare(`DELETE FROM budget_reservations
      WHERE key_id = @key AND instance_id <> @self
        AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = budget_reservations.instance_id
                        AND i.heartbeat_at >= @live_since)`),
    keyHeld: db.prepare<{ key: string; day: string }, { spent: number; held: number }>(`SELECT
        COALESCE((SELECT tokens FROM key_usage WHERE key_id = @key AND day = @day), 0) AS spent,
        COALESCE((SELECT SUM(tokens) FROM budget_reservations WHERE key_id = @key AND day = @day), 0) AS held`),
    insertReservation: db.prepare(`INSERT INTO budget_reservations
      (id, key_id, day, tokens, instance_id, created_at) VALUES (@id, @key, @day, @tokens, @self, @at)`),
    settleReservation: db.prepare('UPDATE budget_reservations SET tokens = @tokens WHERE id = @id'),
    releaseReservation: db.prepare('DELETE FROM budget_reservations WHERE id = ?'),
    chargeReservation: db.prepare(`INSERT INTO key_usage (key_id, day, tokens)
      SELECT key_id, day, @tokens FROM budget_reservations WHERE id = @id AND @tokens > 0
      ON CONFLICT (key_id, day) DO UPDATE SET tokens = tokens + excluded.tokens`),
  };
}

export type KeyStatements = ReturnType<typeof prepareKeyStatements>;

/** Adds `tokens` to the day's usage of the session's owner key (nothing for the admin's). */
export function chargeSessionTokens(stmt: KeyStatements, sessionId: string, tokens: number): void {
  if (tokens > 0) stmt.chargeSession.run({ id: sessionId, day: usageDay(), tokens });
}

/**
 * chargeSessionTokens for a caller that has read the session's owner key
 * already (null: the admin's, nothing to charge), one statement fewer.
 */
export function chargeKeyTokens(stmt: KeyStatements, key: string | null, tokens: number): void {
  if (key !== null && tokens > 0) stmt.chargeKey.run({ key, day: usageDay(), tokens });
}

export class SqliteKeys implements KeyStore {
  constructor(
    private readonly stmt: KeyStatements,
    private readonly write: <T>(work: () => T) => Promise<T>,
  ) {}

  async createKey(input: NewKey): Promise<KeyRow> {
    const id = newId('key');
    return this.write(() => {
      this.stmt.insertKey.run({
        id,
        name: input.name,
        agents: JSON.stringify(input.agents),
        limits: JSON.stringify(input.limits),
        secret_hash: input.secretHash,
        created_at: now(),
      });
      return toKeyRow(this.stmt.getKey.get(id)!);
    });
  }

  async findKey(id: string): Promise<KeyRow | undefined> {
    const row = this.stmt.getKey.get(id);
    return row && toKeyRow(row);
  }

  async findKeyBySecretHash(
    secretHash: string,
  ): Promise<(KeyRow & { secret_hash: string }) | undefined> {
    const row = this.stmt.keyBySecret.get(secretHash);
    return row && { ...toKeyRow(row), secret_hash: row.secret_hash };
  }

  async listKeys(): Promise<KeyRow[]> {
    return this.stmt.listKeys.all().map(toKeyRow);
  }

  async revokeKey(id: string): Promise<KeyRow | undefined> {
    return this.write(() => {
      this.stmt.revokeKey.run({ id, at: now() });
      const row = this.stmt.getKey.get(id);
      return row && toKeyRow(row);
    });
  }

  async setKeyLimits(id: string, limits: KeyLimits): Promise<KeyRow | undefined> {
    return this.write(() => {
      this.stmt.setKeyLimits.run({ id, limits: JSON.stringify(limits) });
      const row = this.stmt.getKey.get(id);
      return row && toKeyRow(row);
    });
  }

  async touchKey(id: string, at: string): Promise<void> {
    await this.write(() => this.stmt.touchKey.run({ id, at }));
  }

  async keyTokensOn(keyId: string, day: string): Promise<number> {
    const row = this.stmt.keyTokens.get(keyId, day);
    return row?.tokens ?? 0;
  }

  async keySpend(keyId: string, day: string): Promise<KeySpend> {
    return this.stmt.keySpend.get({ key: keyId, day })!;
  }

  async listKeySpend(day: string): Promise<Map<string, KeySpend>> {
    const rows = this.stmt.listKeySpend.all({ day });
    return new Map(rows.map(({ key_id, cost, tokens }) => [key_id, { cost, tokens }]));
  }

  async reserveKeyTokens(input: TokenReservationInput): Promise<TokenReservationResult> {
    const key = this.stmt.keyBudget.get(input.keyId);
    if (!key || key.max === null)
      return { spent: 0, held: 0, reserved: false, ...(key ? { keyName: key.name } : {}) };
    const max = key.max;
    // One synchronous transaction: no other reserver runs between the sums and the insert.
    return this.write(() => {
      const liveSince = new Date(Date.now() - input.holder.staleAfterMs).toISOString();
      this.stmt.dropDeadReservations.run({
        key: input.keyId,
        self: input.holder.self,
        live_since: liveSince,
      });
      const { spent, held } = this.stmt.keyHeld.get({ key: input.keyId, day: input.day })!;
      const reserved = spent + held + input.tokens <= max;
      if (reserved)
        this.stmt.insertReservation.run({
          id: input.id,
          key: input.keyId,
          day: input.day,
          tokens: input.tokens,
          self: input.holder.self,
          at: now(),
        });
      return { keyName: key.name, max, spent, held, reserved };
    });
  }

  async settleReservation(id: string, tokens: number): Promise<void> {
    await this.write(() => this.stmt.settleReservation.run({ id, tokens }));
  }

  async releaseReservation(id: string): Promise<void> {
    await this.write(() => this.stmt.releaseReservation.run(id));
  }

  async chargeReservation(id: string, tokens: number): Promise<void> {
    await this.write(() => {
      this.stmt.chargeReservation.run({ id, tokens });
      this.stmt.releaseReservation.run(id);
    });
  }
}
