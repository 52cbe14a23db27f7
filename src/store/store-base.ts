/**
 * What every dialect's store does before its SQL, written once: a dialect
 * extends this class. It forwards the parts each dialect implements in an
 * object of its own (client keys, model-call records), and it holds the
 * contract's entry points whose first steps are the same everywhere (token
 * estimates computed before the transaction, a recall that can find nothing,
 * times as ISO text), handing the dialect one `protected` hook each.
 */
import type { ChatMessage, StoredMessage } from '../llm/messages.js';
import { estimateMessageTokens } from '../llm/tokens.js';
import { plainTerms } from './records.js';
import {
  contextSeqs,
  rankInContext,
  rankShortlist,
  termCounts,
  type ReadRow,
} from './recall-rank.js';
import { stemOf } from './stem.js';
import { correctionOf, mayCorrect, RARE_EXACT, type KnownWord } from './vocabulary.js';
import type {
  AppendOptions,
  CallRecordStore,
  AppendedWithEvents,
  ImportedMessage,
  KeyLimits,
  KeyRow,
  KeySpend,
  TokenReservationInput,
  TokenReservationResult,
  KeyStore,
  LoadedVector,
  MessageVector,
  ModelCallFilter,
  ModelCallRecord,
  ModelCallSummary,
  NewKey,
  NewMessageVector,
  NewModelCall,
  Page,
  RecallHit,
  RecallPeriod,
  SearchTerm,
  UnembeddedMessage,
  VectorStore,
} from './store.js';

/** Stems and sessions the typo correction remembers, at most; each memo starts over past it. */
const MAX_REMEMBERED = 4_096;

/** One append as a dialect writes it, in one transaction. */
export interface PendingAppend {
  sessionId: string;
  messages: ChatMessage[];
  /** The messages' token estimates, computed before the transaction (CPU work off the lock). */
  tokens: readonly number[];
  options: AppendOptions;
}

/** A recall search that can find something: plain words, a compacted range, a positive limit. */
export interface RecallSearch {
  sessionId: string;
  words: SearchTerm[];
  maxSeq: number;
  limit: number;
}

/** A message read for recall's ranking: a shortlisted one, or one around the best of them. */
export interface RecallRead extends ReadRow {
  role: string;
  created_at: string;
}

/**
 * What a dialect's recall search found: the shortlisted rows, read (their
 * content clipped to RECALL_CONTENT_CHARS, `chars` the whole length), each
 * ranked word's weight (BM25's idf among the session's searched messages;
 * the words past the last weight are not ranked) and whether it is evidence
 * (evidenceWords).
 */
export interface RecallShortlist {
  rows: RecallRead[];
  weights: number[];
  evidence: boolean[];
}

/** A finished daemon tick, its times as stored. */
export interface FinishedRun {
  agentName: string;
  owner: string;
  lastRunAt: string;
  nextRunAt: string | null;
}

export abstract class StoreBase implements KeyStore, CallRecordStore, VectorStore {
  protected abstract readonly keys: KeyStore;
  protected abstract readonly calls: CallRecordStore;
  protected abstract readonly vectors: VectorStore;

  // ---- messages -------------------------------------------------------------

  protected abstract writeMessages(append: PendingAppend): Promise<StoredMessage[]>;

  protected abstract writeMessagesWithEvents(
    append: PendingAppend,
    eventType: string,
  ): Promise<AppendedWithEvents>;

  /** Writes a batch of imported messages; never called with none. */
  protected abstract writeImportedMessages(
    sessionId: string,
    messages: readonly ImportedMessage[],
    tokens: readonly number[],
  ): Promise<void>;

  /** The rows that may answer `search`, read, and the words' weights; none when nothing may. */
  protected abstract recall(search: RecallSearch): Promise<RecallShortlist>;

  /**
   * The session's messages at `seqs` (ascending) that recall may return: at or
   * below `maxSeq`, not system; read as the shortlist's rows are, `held` 0.
   */
  protected abstract recallContext(
    sessionId: string,
    seqs: readonly number[],
    maxSeq: number,
  ): Promise<RecallRead[]>;

  /** Whether the vocabulary has not yet read a message of the session at or below `maxSeq`. */
  protected abstract vocabularyBehind(sessionId: string, maxSeq: number): Promise<boolean>;

  /**
   * Reads up to VOCABULARY_BATCH messages above the vocabulary's mark into
   * it, in one transaction that moves the mark; returns how many it read (0:
   * the vocabulary has read every message).
   */
  abstract indexVocabularyBatch(): Promise<number>;

  /** How many messages hold each stem, as the vocabulary counted them (absent: none). */
  protected abstract heldStems(stems: readonly string[]): Promise<Map<string, number>>;

  /** Each query word's stored neighbours: the words that may be its correction. */
  protected abstract wordCandidates(words: readonly string[]): Promise<Map<string, KnownWord[]>>;

  async appendMessages(
    sessionId: string,
    messages: ChatMessage[],
    options: AppendOptions = {},
  ): Promise<StoredMessage[]> {
    const tokens = messages.map(estimateMessageTokens);
    return this.writeMessages({ sessionId, messages, tokens, options });
  }

  async appendMessagesWithEvents(
    sessionId: string,
    messages: ChatMessage[],
    eventType: string,
    options: AppendOptions = {},
  ): Promise<AppendedWithEvents> {
    const tokens = messages.map(estimateMessageTokens);
    return this.writeMessagesWithEvents({ sessionId, messages, tokens, options }, eventType);
  }

  async appendImportedMessages(
    sessionId: string,
    messages: readonly ImportedMessage[],
  ): Promise<void> {
    if (messages.length === 0) return;
    await this.writeImportedMessages(sessionId, messages, messages.map(estimateMessageTokens));
  }

  async recallMessages(
    sessionId: string,
    terms: readonly SearchTerm[],
    maxSeq: number,
    limit: number,
    period?: RecallPeriod,
  ): Promise<RecallHit[]> {
    const words = plainTerms(terms);
    if (words.length === 0 || maxSeq <= 0 || limit <= 0) return [];
    const found = await this.recall({ sessionId, words, maxSeq, limit });
    if (found.rows.length === 0) return [];
    const { weights, evidence } = found;
    const ranked = words.slice(0, weights.length);
    // Counted once: the shortlist is ranked alone, then again among its neighbours.
    const rows = found.rows.map((row) => ({ ...row, counts: termCounts(ranked, row.content) }));
    // The messages around the best matches: an answer sits next to the
    // question it answers, seldom holding its words (recall-rank.ts).
    const best = rankShortlist(rows, ranked, weights, limit).map((row) => row.seq);
    const wanted = contextSeqs(best, new Set(rows.map((row) => row.seq)), maxSeq);
    const around = wanted.length > 0 ? await this.recallContext(sessionId, wanted, maxSeq) : [];
    return rankInContext([...rows, ...around], ranked, weights, limit, { evidence, period }).map(
      ({ seq, role, content, created_at, score }) => ({ seq, role, content, created_at, score }),
    );
  }

  /**
   * Stems the vocabulary holds too often to correct: its counts only grow, so
   * such a stem stays one, and a call of only such words reads nothing.
   */
  private readonly commonStems = new Set<string>();
  /** Per session, the pointer up to which the vocabulary was last found complete. */
  private readonly vocabularyCovers = new Map<string, number>();

  /**
   * Reads into the vocabulary what it still lacks of the session's messages
   * up to `maxSeq`: on a large database start-up reads them in batches, and
   * a search reads what it still needs first (as the full-text index does).
   * Remembered per session, so a call with the same pointer sends nothing.
   */
  protected async coverVocabulary(sessionId: string, maxSeq: number): Promise<void> {
    if ((this.vocabularyCovers.get(sessionId) ?? 0) >= maxSeq) return;
    while (await this.vocabularyBehind(sessionId, maxSeq)) {
      if ((await this.indexVocabularyBatch()) === 0) break;
    }
    if (this.vocabularyCovers.size >= MAX_REMEMBERED) this.vocabularyCovers.clear();
    this.vocabularyCovers.set(sessionId, maxSeq);
  }

  async correctRecallTerms(
    sessionId: string,
    terms: readonly SearchTerm[],
    maxSeq: number,
  ): Promise<SearchTerm[]> {
    const words = [
      ...new Set(
        terms
          .filter((t) => !t.prefix && mayCorrect(t.text) && !this.commonStems.has(stemOf(t.text)))
          .map((t) => t.text),
      ),
    ];
    if (words.length === 0 || maxSeq <= 0) return [...terms];
    await this.coverVocabulary(sessionId, maxSeq);
    const held = await this.heldStems([...new Set(words.map(stemOf))]);
    const heldBy = (word: string) => held.get(stemOf(word)) ?? 0;
    for (const word of words) {
      if (heldBy(word) < RARE_EXACT) continue;
      if (this.commonStems.size >= MAX_REMEMBERED) this.commonStems.clear();
      this.commonStems.add(stemOf(word));
    }
    const rare = words.filter((word) => heldBy(word) < RARE_EXACT);
    if (rare.length === 0) return [...terms];
    const candidates = await this.wordCandidates(rare);
    const fixes = new Map<string, string>();
    for (const word of rare) {
      const fix = correctionOf(word, heldBy(word), candidates.get(word) ?? []);
      if (fix !== undefined) fixes.set(word, fix);
    }
    // A word no message holds is replaced. One that a message holds may be
    // no typo ("contest" beside the "content" other sessions say more often):
    // it is searched as written, and its correction after the other terms.
    const added = new Set<string>();
    const corrected = terms.map((t) => {
      const fix = t.prefix ? undefined : fixes.get(t.text);
      if (fix === undefined) return t;
      if (heldBy(t.text) === 0) return { ...t, text: fix };
      added.add(fix);
      return t;
    });
    return [...corrected, ...[...added].map((text) => ({ text, prefix: false }))];
  }

  // ---- daemons --------------------------------------------------------------

  protected abstract finishRun(run: FinishedRun): Promise<boolean>;

  async finishDaemonRun(
    agentName: string,
    owner: string,
    lastRunAt: Date,
    nextRunAt: Date | null,
  ): Promise<boolean> {
    const times = {
      lastRunAt: lastRunAt.toISOString(),
      nextRunAt: nextRunAt?.toISOString() ?? null,
    };
    return this.finishRun({ agentName, owner, ...times });
  }

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

  // ---- message vectors ------------------------------------------------------

  unembeddedMessages(
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<UnembeddedMessage[]> {
    return this.vectors.unembeddedMessages(model, dimensions, afterId, limit);
  }

  saveVectors(
    vectors: readonly NewMessageVector[],
    charges: readonly { sessionId: string; tokens: number }[],
  ): Promise<void> {
    return this.vectors.saveVectors(vectors, charges);
  }

  loadVectors(
    sessionId: string,
    model: string,
    dimensions: number,
    afterId: number,
    limit: number,
  ): Promise<LoadedVector[]> {
    return this.vectors.loadVectors(sessionId, model, dimensions, afterId, limit);
  }

  listVectors(sessionId: string, afterSeq: number, limit: number): Promise<MessageVector[]> {
    return this.vectors.listVectors(sessionId, afterSeq, limit);
  }

  appendImportedVectors(sessionId: string, vectors: readonly MessageVector[]): Promise<void> {
    return this.vectors.appendImportedVectors(sessionId, vectors);
  }

  messagesAtSeqs(sessionId: string, seqs: readonly number[], maxSeq: number): Promise<RecallHit[]> {
    return this.vectors.messagesAtSeqs(sessionId, seqs, maxSeq);
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

  setKeyLimits(id: string, limits: KeyLimits): Promise<KeyRow | undefined> {
    return this.keys.setKeyLimits(id, limits);
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

  reserveKeyTokens(input: TokenReservationInput): Promise<TokenReservationResult> {
    return this.keys.reserveKeyTokens(input);
  }

  settleReservation(id: string, tokens: number): Promise<void> {
    return this.keys.settleReservation(id, tokens);
  }

  releaseReservation(id: string): Promise<void> {
    return this.keys.releaseReservation(id);
  }

  chargeReservation(id: string, tokens: number): Promise<void> {
    return this.keys.chargeReservation(id, tokens);
  }
}
