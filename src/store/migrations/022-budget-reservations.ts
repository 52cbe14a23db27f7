/**
 * Migration 022: budget reservations. A model call of a key's session holds
 * its estimated tokens (prompt estimate plus requested output) in
 * `budget_reservations` while it runs, so concurrent calls — on this instance
 * or any other on the same database — see each other's claims before the
 * usage lands in `key_usage`. Each row names the instance that holds it: a
 * row whose instance stopped heartbeating no longer counts, and the next
 * reservation of its key deletes it.
 *
 * On Postgres, `cairn_reserve_tokens` checks and reserves in one round trip:
 * it locks the key's row first, so concurrent reservers of one key queue,
 * and its later statements each read a fresh snapshot (plpgsql under READ
 * COMMITTED), so every reservation committed before the lock is counted. A
 * single conditional INSERT … SELECT could not do this: its sums would be read
 * from the snapshot taken before it waited for the lock. SQLite needs no
 * function: one process writes a file, and the check and insert run in one
 * synchronous transaction. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 22;
export const name = 'budget-reservations';
export const up = (d: SchemaDialect): string => `
CREATE TABLE budget_reservations (
  id          ${d.orderedText} PRIMARY KEY,
  key_id      ${d.orderedText} NOT NULL,
  day         ${d.orderedText} NOT NULL,
  tokens      ${d.bigInteger} NOT NULL,
  instance_id TEXT NOT NULL,
  created_at  ${d.orderedText} NOT NULL
);
CREATE INDEX budget_reservations_by_key ON budget_reservations (key_id, day);
${d.pick({
  sqlite: '',
  postgres: `
CREATE OR REPLACE FUNCTION cairn_reserve_tokens(
  p_id TEXT, p_key TEXT, p_day TEXT, p_tokens BIGINT, p_self TEXT, p_stale_after_ms DOUBLE PRECISION, p_at TEXT
) RETURNS TABLE (key_name TEXT, max_tokens BIGINT, spent BIGINT, held BIGINT, reserved BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
  v_name TEXT;
  v_max BIGINT;
  v_spent BIGINT;
  v_held BIGINT;
BEGIN
  SELECT k.name, (k.limits::jsonb ->> 'tokensPerDay')::bigint INTO v_name, v_max
    FROM keys k WHERE k.id = p_key FOR UPDATE;
  IF v_max IS NULL THEN
    RETURN QUERY SELECT v_name, NULL::bigint, 0::bigint, 0::bigint, FALSE;
    RETURN;
  END IF;
  DELETE FROM budget_reservations r
   WHERE r.key_id = p_key AND r.instance_id <> p_self
     AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.id = r.instance_id
                      AND i.heartbeat_at >= now() - make_interval(secs => p_stale_after_ms / 1000));
  SELECT COALESCE((SELECT u.tokens FROM key_usage u WHERE u.key_id = p_key AND u.day = p_day), 0),
         COALESCE((SELECT SUM(r.tokens) FROM budget_reservations r WHERE r.key_id = p_key AND r.day = p_day), 0)
    INTO v_spent, v_held;
  IF v_spent + v_held + p_tokens > v_max THEN
    RETURN QUERY SELECT v_name, v_max, v_spent, v_held, FALSE;
    RETURN;
  END IF;
  INSERT INTO budget_reservations (id, key_id, day, tokens, instance_id, created_at)
    VALUES (p_id, p_key, p_day, p_tokens, p_self, p_at);
  RETURN QUERY SELECT v_name, v_max, v_spent, v_held, TRUE;
END
$$;
`,
})}`;
