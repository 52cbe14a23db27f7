/**
 * The parts of `Store` that each dialect implements in an object of its own
 * (client keys, model-call records), forwarded once here: a dialect's store
 * extends this class and names its two parts.
 */
import type {
  CallRecordStore,
  KeyRow,
  KeySpend,
  KeyStore,
  ModelCallFilter,
  ModelCallRecord,
  ModelCallSummary,
  NewKey,
  NewModelCall,
  Page,
} from './store.js';

export abstract class DelegatingStore implements KeyStore, CallRecordStore {
  protected abstract readonly keys: KeyStore;
  protected abstract readonly calls: CallRecordStore;

  // ---- model-call records --------------------------------------------------

  appendModelCalls(calls: readonly NewModelCall[]): Promise<void> {
    return this.calls.appendModelCalls(calls);
  }

  addSessionCost(sessionId: string, cost: number): Promise<void> {
    return this.calls.addSessionCost(sessionId, cost);
  }

  listModelCalls(sessionId: string, filter: ModelCallFilter): Promise<Page<ModelCallSummary>> {
    return this.calls.listModelCalls(sessionId, filter);
  }

  findModelCall(id: string): Promise<ModelCallRecord | undefined> {
    return this.calls.findModelCall(id);
  }

  pruneModelCalls(before: string, maxChains: number): Promise<number> {
    return this.calls.pruneModelCalls(before, maxChains);
  }

  // ---- keys -----------------------------------------------------------------

  createKey(input: NewKey): Promise<KeyRow> {
    return this.keys.createKey(input);
  }

  findKey(id: string): Promise<KeyRow | undefined> {
    return this.keys.findKey(id);
  }

  findKeyBySecretHash(secretHash: string): Promise<(KeyRow & { secret_hash: string }) | undefined> {
    return this.keys.findKeyBySecretHash(secretHash);
  }

  listKeys(): Promise<KeyRow[]> {
    return this.keys.listKeys();
  }

  revokeKey(id: string): Promise<KeyRow | undefined> {
    return this.keys.revokeKey(id);
  }

  touchKey(id: string, at: string): Promise<void> {
    return this.keys.touchKey(id, at);
  }

  keyTokensOn(keyId: string, day: string): Promise<number> {
    return this.keys.keyTokensOn(keyId, day);
  }

  keySpend(keyId: string, day: string): Promise<KeySpend> {
    return this.keys.keySpend(keyId, day);
  }

  listKeySpend(day: string): Promise<Map<string, KeySpend>> {
    return this.keys.listKeySpend(day);
  }
}
