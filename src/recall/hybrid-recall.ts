/**
 * The vector half of hybrid recall, and how its candidates join the lexical
 * ones.
 *
 * `VectorRecall.candidates` embeds the query (once per distinct text: a tool
 * loop's calls share the user's message, and the embedding is remembered),
 * brings the session's vectors up to date in memory (one indexed read of
 * what is newer than what it holds), and searches them (vector-index.ts).
 * It never throws and never waits longer than the role's timeout: a failing
 * or slow provider makes it answer `undefined` (recall stays lexical), logs
 * one line when the provider starts failing, counts every fallback in the
 * metrics, and leaves the provider alone for PAUSE_AFTER_FAILURE_MS so the
 * following calls are not slowed by a timeout each. The query's call is
 * reserved on the session owner's key: a key whose day cannot cover it gets
 * lexical recall for that call alone (counted as `embed_budget`), and the
 * provider is not paused for anyone, since nothing failed.
 *
 * `fuseCandidates` is a weighted reciprocal-rank fusion. The lexical list
 * (what passed `minScore`, best first) has weight 1; the vector list weight
 * VECTOR_WEIGHT, and only vectors at least MIN_SIMILARITY similar to the query
 * and within RELATIVE_SIMILARITY of the best one enter it. With RRF_K = 60 a
 * vector-only item scores at most 0.5/61, below every lexical item up to rank
 * 61: a weak (or wrong) vector list can reorder nothing the words found,
 * only fill the places they left empty and lift a lexical hit the vectors
 * agree with. That is what "never below lexical" needs: the words' answers
 * always come first.
 */
import { CairnError } from '../errors.js';
import type { LoadedVector, RecallHit, SessionRow, VectorStore } from '../store/store.js';
import type { Embedder } from './embedder.js';
import { VectorIndex } from './vector-index.js';

export const RRF_K = 60;
export const VECTOR_WEIGHT = 0.5;
/** Cosine similarity a vector-only candidate needs at least. */
export const MIN_SIMILARITY = 0.3;
/** … and at least this share of the best candidate's similarity. */
export const RELATIVE_SIMILARITY = 0.75;
/** After a failed embedding the provider is not asked again for this long (recall stays lexical). */
export const PAUSE_AFTER_FAILURE_MS = 30_000;
/** Query embeddings remembered, by text. */
const REMEMBERED_QUERIES = 256;
/** Bytes of session vectors kept in memory at most (least recently searched go first). */
export const MAX_INDEX_BYTES = 512 * 1024 * 1024;
/** Vectors read per query while loading a session. */
const LOAD_PAGE = 5_000;
/** A query is clipped to this many characters before it is embedded. */
export const EMBED_QUERY_CHARS = 2_000;

/** A compacted message found by its meaning. */
export interface VectorHit extends RecallHit {
  similarity: number;
}

/**
 * The fused list, best first: lexical hits in their order unless the vectors
 * agree with a later one, then vector-only hits. Pure.
 */
export function fuseCandidates(
  lexical: readonly RecallHit[],
  vector: readonly VectorHit[],
): RecallHit[] {
  const best = vector[0]?.similarity ?? 0;
  const floor = Math.max(MIN_SIMILARITY, best * RELATIVE_SIMILARITY);
  const scored = new Map<number, { hit: RecallHit; score: number }>();
  lexical.forEach((hit, rank) => scored.set(hit.seq, { hit, score: 1 / (RRF_K + rank + 1) }));
  vector
    .filter((hit) => hit.similarity >= floor)
    .forEach((hit, rank) => {
      const add = VECTOR_WEIGHT / (RRF_K + rank + 1);
      const known = scored.get(hit.seq);
      if (known) known.score += add;
      else scored.set(hit.seq, { hit, score: add });
    });
  return [...scored.values()].sort((a, b) => b.score - a.score).map(({ hit }) => hit);
}

/** Why a call's hybrid recall fell back to lexical search (a metric label: a closed set). */
export type RecallDegradedReason = 'embed_failed' | 'embed_paused' | 'embed_budget';

export interface VectorRecallDeps {
  store: Pick<VectorStore, 'loadVectors' | 'messagesAtSeqs'>;
  embedder: Pick<Embedder, 'embed' | 'model'>;
  /** One line when the provider starts failing (and one when it answers again). */
  warn: (details: Record<string, unknown>, message: string) => void;
  /** Counts a call that fell back to lexical recall. */
  degraded: (reason: RecallDegradedReason) => void;
  now?: () => number;
  maxIndexBytes?: number;
}

export class VectorRecall {
  private readonly indexes = new Map<string, VectorIndex>();
  private readonly queries = new Map<string, Float32Array>();
  private pausedUntil = 0;
  private failing = false;

  constructor(private readonly deps: VectorRecallDeps) {}

  /**
   * The compacted messages (seq ≤ maxSeq) nearest `text` in meaning, best
   * first, at most `limit`; undefined when the embedding failed.
   */
  async candidates(
    session: Pick<SessionRow, 'id' | 'epoch' | 'owner_key'>,
    text: string,
    maxSeq: number,
    limit: number,
  ): Promise<VectorHit[] | undefined> {
    const query = await this.queryVector(session, text.slice(0, EMBED_QUERY_CHARS));
    if (!query) return undefined;
    const index = await this.loaded(session, query.length);
    const matches = index.search(query, limit, maxSeq, MIN_SIMILARITY);
    if (matches.length === 0) return [];
    const found = await this.deps.store.messagesAtSeqs(
      session.id,
      matches.map((match) => match.seq),
      maxSeq,
    );
    const bySeq = new Map(found.map((hit) => [hit.seq, hit]));
    const hits: VectorHit[] = [];
    for (const match of matches) {
      const hit = bySeq.get(match.seq);
      if (hit && hit.content.trim() !== '') hits.push({ ...hit, similarity: match.similarity });
    }
    return hits;
  }

  private async queryVector(
    session: Pick<SessionRow, 'id' | 'owner_key'>,
    text: string,
  ): Promise<Float32Array | undefined> {
    const remembered = this.queries.get(text);
    if (remembered) {
      this.queries.delete(text);
      this.queries.set(text, remembered);
      return remembered;
    }
    const now = (this.deps.now ?? Date.now)();
    if (now < this.pausedUntil) {
      this.deps.degraded('embed_paused');
      return undefined;
    }
    try {
      const embedded = await this.deps.embedder.embed(session.id, [text], {
        ownerKey: session.owner_key,
      });
      const vector = embedded.vectors[0]!;
      if (this.failing) {
        this.failing = false;
        this.deps.warn(
          { model: this.deps.embedder.model },
          'embedding provider answers again: hybrid recall is back',
        );
      }
      this.queries.set(text, vector);
      if (this.queries.size > REMEMBERED_QUERIES) {
        const oldest = this.queries.keys().next().value;
        if (oldest !== undefined) this.queries.delete(oldest);
      }
      return vector;
    } catch (err) {
      // The key's budget said no before the provider was asked: nothing to pause.
      if (err instanceof CairnError && err.code === 'BUDGET_EXCEEDED') {
        this.deps.degraded('embed_budget');
        return undefined;
      }
      this.pausedUntil = now + PAUSE_AFTER_FAILURE_MS;
      this.deps.degraded('embed_failed');
      if (!this.failing) {
        this.failing = true;
        this.deps.warn(
          {
            model: this.deps.embedder.model,
            error: err instanceof Error ? err.message : String(err),
            pauseMs: PAUSE_AFTER_FAILURE_MS,
          },
          'embedding provider failed: recall falls back to lexical search',
        );
      }
      return undefined;
    }
  }

  /** The session's index with every vector written so far (of the query's dimensions). */
  private async loaded(
    session: { id: string; epoch: number },
    dimensions: number,
  ): Promise<VectorIndex> {
    const key = `${session.id}\u0000${session.epoch}\u0000${dimensions}`;
    let index = this.indexes.get(key);
    if (index) this.indexes.delete(key);
    else index = new VectorIndex(dimensions);
    this.indexes.set(key, index);
    for (;;) {
      const page: LoadedVector[] = await this.deps.store.loadVectors(
        session.id,
        this.deps.embedder.model,
        dimensions,
        index.lastId,
        LOAD_PAGE,
      );
      for (const row of page) {
        index.add(row.seq, row.vector);
        index.lastId = Math.max(index.lastId, row.id);
      }
      if (page.length < LOAD_PAGE) break;
    }
    this.evict(key);
    return index;
  }

  /** Drops the least recently searched indexes beyond the memory cap (never `keep`). */
  private evict(keep: string): void {
    const max = this.deps.maxIndexBytes ?? MAX_INDEX_BYTES;
    let total = 0;
    for (const index of this.indexes.values()) total += index.bytes;
    for (const [key, index] of this.indexes) {
      if (total <= max) break;
      if (key === keep) continue;
      this.indexes.delete(key);
      total -= index.bytes;
    }
  }
}
