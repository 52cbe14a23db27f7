/**
 * The `Budget` of a server: reservations of a key's tokens in the database
 * (`budget_reservations`), so every instance on it agrees on what is held.
 * Each reservation names this instance; one whose instance stops
 * heartbeating stops counting (the same liveness the task sweep uses), so a
 * server killed mid-call does not hold a key's day for good.
 */
import type { Budget, Reservation } from '../runtime/budget.js';
import { dayBudgetExceeded } from '../runtime/budget.js';
import { newId, usageDay } from '../store/records.js';
import type { KeyStore } from '../store/store.js';
import { STALE_AFTER_MS } from './instance-heartbeat.js';

export interface KeyReservationsOptions {
  store: Pick<
    KeyStore,
    'reserveKeyTokens' | 'settleReservation' | 'releaseReservation' | 'chargeReservation'
  >;
  /** This instance: the holder of its reservations. */
  instanceId: string;
  /** How old a holder's heartbeat may be for its reservations to count. */
  staleAfterMs?: number;
  now?: () => number;
}

export class KeyReservations implements Budget {
  constructor(private readonly options: KeyReservationsOptions) {}

  async reserve(keyId: string | null, tokens: number): Promise<Reservation | undefined> {
    if (keyId === null) return undefined;
    const { store, instanceId } = this.options;
    const now = new Date(this.options.now?.() ?? Date.now());
    const id = newId('rsv');
    const result = await store.reserveKeyTokens({
      id,
      keyId,
      day: usageDay(now.toISOString()),
      tokens,
      holder: { self: instanceId, staleAfterMs: this.options.staleAfterMs ?? STALE_AFTER_MS },
    });
    if (result.max === undefined) return undefined;
    if (!result.reserved)
      throw dayBudgetExceeded(
        {
          keyName: result.keyName ?? keyId,
          max: result.max,
          spent: result.spent,
          held: result.held,
          needed: tokens,
        },
        now,
      );
    return {
      tokens,
      settle: (used) => store.settleReservation(id, used),
      release: () => store.releaseReservation(id),
      charge: (used) => store.chargeReservation(id, used),
    };
  }
}
