/**
 * Hybrid recall end to end, on both store dialects, with the fake provider's
 * `/v1/embeddings` (concept vectors that put paraphrases near each other):
 * a question that shares too few words with a compacted fact finds it by
 * meaning, where lexical recall alone finds nothing; embedding calls are on
 * the record and charged; a provider outage mid-conversation leaves recall
 * lexical (no error, one log line, a metric) and the backlog catches up
 * after it; a model change re-embeds; forks, exports and imports carry the
 * vectors, deletes drop them.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { OpenAiEmbeddings } from '../../src/llm/embedding-client.js';
import { FAKE_EMBED_DIMENSIONS } from '../fakes/concept-embeddings.js';
import { Embedder } from '../../src/recall/embedder.js';
import { EmbeddingBacklog } from '../../src/recall/embedding-backlog.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import {
  chatOn,
  DATABASES,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';

const FACT = 'The deploy key rotates every 90 days, on the first Monday of the quarter.';
const PARAPHRASE = 'How often do we change the deploy credentials?';
const NDJSON = 'application/x-ndjson';

/** 16 messages; seq 4 holds the fact, the rest talk about something else. */
function conversation(): ChatMessage[] {
  return Array.from({ length: 16 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: i === 2 ? FACT : `Filler message ${i} about the weather and lunch plans.`,
  }));
}

describe.each(DATABASES)('hybrid recall (%s)', (database) => {
  let t: TestApp;
  const fake = () => t.fake!;
  const backlog = () => t.app.embeddingBacklog!;

  beforeAll(async () => {
    t = await startTestApp({
      database,
      embedModel: { pricing: { inputPerMTok: 0.02 } },
      agents: {
        assistant: TEST_AGENT,
        lexical: {
          ...TEST_AGENT,
          name: 'lexical',
          defaultCompaction: { recall: { mode: 'lexical' } },
        },
      },
    });
    // The tests walk the backlog themselves, so what is embedded when is theirs to say.
    await t.app.embeddingBacklog!.close();
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setEmbeddings('ok');
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'They talked about the weather.' } : { content: 'ok' },
    );
  });

  async function compacted(agentName = 'assistant'): Promise<string> {
    const id = await seedSession(t.app, conversation(), { agentName });
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.json()).toMatchObject({ compactedCount: 8 });
    await backlog().catchUp();
    return id;
  }

  const embedRequests = () => fake().requests.filter((r) => r.path === '/v1/embeddings');

  it('finds a paraphrased fact by meaning; lexical mode does not', async () => {
    const id = await compacted();
    const res = await chatOn(t.app, id, PARAPHRASE);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().recall?.seqs).toContain(4);

    const other = await compacted('lexical');
    const lexical = await chatOn(t.app, other, PARAPHRASE, 'lexical');
    expect(lexical.statusCode, lexical.body).toBe(200);
    expect(lexical.json().recall).toBeNull();
  });

  it('a filler message recalls nothing, vectors or not', async () => {
    const id = await compacted();
    const res = await chatOn(t.app, id, 'ok, thanks!');
    expect(res.json().recall).toBeNull();
  });

  it('embeds the query once per distinct text and records, prices and charges every call', async () => {
    const id = await compacted();
    fake().reset();
    fake().setDefault(() => ({ content: 'ok' }));
    await chatOn(t.app, id, 'Which key do we deploy with, and when does it rotate?');
    await chatOn(t.app, id, 'Which key do we deploy with, and when does it rotate?');
    const queries = embedRequests().filter((r) =>
      (r.body.input as string[]).includes('Which key do we deploy with, and when does it rotate?'),
    );
    expect(queries).toHaveLength(1);
    await backlog().catchUp();
    const calls = await t.app.server.inject({ url: `/sessions/${id}/calls?role=embed&limit=50` });
    expect(calls.statusCode, calls.body).toBe(200);
    const items = calls.json().calls as { role: string; input_tokens: number; cost: number }[];
    expect(items.length).toBeGreaterThanOrEqual(2);
    for (const item of items) {
      expect(item.role).toBe('embed');
      expect(item.input_tokens).toBeGreaterThan(0);
      expect(item.cost).toBeGreaterThan(0);
    }
  });

  it('a change of model re-embeds every message in the background', async () => {
    const id = await compacted();
    const role = t.app.settings.models.embed!;
    const other = new Embedder({
      client: new OpenAiEmbeddings({ ...role, model: 'fake-embed-2', dimensions: 32 }),
      role: { ...role, model: 'fake-embed-2', dimensions: 32 },
      recorder: { noteEmbedding: () => null },
      store: t.app.store,
    });
    const walk = new EmbeddingBacklog({ store: t.app.store, embedder: other, warn: () => {} });
    expect(await walk.catchUp()).toBeGreaterThanOrEqual(16);
    const vectors = await t.app.store.listVectors(id, 0, 100);
    expect(vectors).toHaveLength(16);
    for (const vector of vectors) {
      expect(vector).toMatchObject({ model: 'fake-embed-2', dimensions: 32 });
      expect(vector.vector).toHaveLength(32);
    }
    expect(await walk.catchUp()).toBe(0);
  });

  it('while a model change is re-embedded, search ignores the stale vectors: recall is lexical until the walk reaches the session', async () => {
    const id = await compacted();
    const role = t.app.settings.models.embed!;
    const dimensions = FAKE_EMBED_DIMENSIONS;
    // Vectors of another model with the app's dimensions: a search that took
    // them would compare the query with another model's space.
    const other = new Embedder({
      client: new OpenAiEmbeddings({ ...role, model: 'fake-embed-2', dimensions }),
      role: { ...role, model: 'fake-embed-2', dimensions },
      recorder: { noteEmbedding: () => null },
      store: t.app.store,
    });
    await new EmbeddingBacklog({ store: t.app.store, embedder: other, warn: () => {} }).catchUp();
    expect(await t.app.store.loadVectors(id, 'fake-embed-2', dimensions, 0, 100)).toHaveLength(16);
    expect(await t.app.store.loadVectors(id, role.model, dimensions, 0, 100)).toEqual([]);
    const stale = await chatOn(t.app, id, PARAPHRASE);
    expect(stale.statusCode, stale.body).toBe(200);
    expect(stale.json().recall).toBeNull();
    // And back: a walk with the app's own model re-embeds them again.
    const back = new EmbeddingBacklog({
      store: t.app.store,
      embedder: new Embedder({
        client: new OpenAiEmbeddings(role),
        role,
        recorder: { noteEmbedding: () => null },
        store: t.app.store,
      }),
      warn: () => {},
    });
    expect(await back.catchUp()).toBeGreaterThanOrEqual(16);
    expect((await t.app.store.listVectors(id, 0, 100))[0]).toMatchObject({ model: 'fake-embed' });
    // Once the walk has passed, the same question finds the fact by meaning again.
    const fresh = await chatOn(t.app, id, PARAPHRASE);
    expect(fresh.statusCode, fresh.body).toBe(200);
    expect(fresh.json().recall?.seqs).toContain(4);
  });

  it('a fork and an export/import carry the vectors; a delete drops them', async () => {
    const id = await compacted();
    const source = await t.app.store.listVectors(id, 0, 100);
    expect(source).toHaveLength(16);

    const fork = await t.app.server.inject({
      method: 'POST',
      url: `/sessions/${id}/fork`,
      payload: { atSeq: 10 },
    });
    expect(fork.statusCode, fork.body).toBe(201);
    const forkId = fork.json().session.id as string;
    const forked = await t.app.store.listVectors(forkId, 0, 100);
    expect(forked.map((v) => v.seq)).toEqual(source.filter((v) => v.seq <= 10).map((v) => v.seq));
    expect([...forked[0]!.vector]).toEqual([...source[0]!.vector]);

    const exported = await t.app.server.inject({ url: `/sessions/${id}/export` });
    const vectorLines = exported.body
      .trim()
      .split('\n')
      .filter((line) => line.includes('"type":"vector"'));
    expect(vectorLines).toHaveLength(16);
    fake().reset();
    const imported = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': NDJSON },
      payload: exported.body,
    });
    expect(imported.statusCode, imported.body).toBe(201);
    const copy = imported.json().session.id as string;
    const copied = await t.app.store.listVectors(copy, 0, 100);
    expect(copied.map((v) => [v.seq, v.model, [...v.vector]])).toEqual(
      source.map((v) => [v.seq, v.model, [...v.vector]]),
    );
    // Nothing left to embed: the import paid for nothing.
    expect(await backlog().catchUp()).toBe(0);
    expect(embedRequests()).toHaveLength(0);
    // The imported copy recalls by meaning at once.
    const res = await chatOn(t.app, copy, PARAPHRASE);
    expect(res.json().recall?.seqs).toContain(4);

    expect(
      (await t.app.server.inject({ method: 'DELETE', url: `/sessions/${id}` })).statusCode,
    ).toBe(204);
    expect(await t.app.store.listVectors(id, 0, 100)).toEqual([]);
  });

  it('after the newest session is deleted, the next messages are still embedded (SQLite gives their ids again)', async () => {
    await backlog().catchUp();
    const gone = await compacted();
    expect(
      (await t.app.server.inject({ method: 'DELETE', url: `/sessions/${gone}` })).statusCode,
    ).toBe(204);
    const next = await seedSession(t.app, conversation());
    expect(await backlog().catchUp()).toBeGreaterThanOrEqual(16);
    expect(await t.app.store.listVectors(next, 0, 100)).toHaveLength(16);
  });

  it('an import with a bad vector line is refused with the line number', async () => {
    const id = await compacted();
    const exported = await t.app.server.inject({ url: `/sessions/${id}/export` });
    const lines = exported.body.trim().split('\n');
    const at = lines.findIndex((line) => line.includes('"type":"vector"'));
    const bad = JSON.parse(lines[at]!) as { vector: { dimensions: number } };
    bad.vector.dimensions += 1;
    lines[at] = JSON.stringify(bad);
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { 'content-type': NDJSON },
      payload: `${lines.join('\n')}\n`,
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('VALIDATION_ERROR');
    expect(res.json().error.message).toContain(`line ${at + 1}`);
  });
  it('an outage mid-conversation: turns go on with lexical recall, the backlog catches up after', async () => {
    const id = await compacted();
    fake().setEmbeddings('fail');
    const during = await chatOn(t.app, id, 'Which deploy key rotates, and how often?');
    expect(during.statusCode, during.body).toBe(200);
    // The words still find the fact.
    expect(during.json().recall?.seqs).toContain(4);
    // Asked again within the pause: not tried, not waited for.
    const again = await chatOn(t.app, id, 'When do we swap the deployment secret?');
    expect(again.statusCode).toBe(200);
    const metrics = await t.app.server.inject({ url: '/metrics' });
    expect(metrics.body).toMatch(/cairn_recall_degraded_total\{reason="embed_failed"\} [1-9]/);
    expect(metrics.body).toMatch(/cairn_recall_degraded_total\{reason="embed_paused"\} [1-9]/);

    // The turns' messages have no vectors yet; after the outage they get them.
    await expect(backlog().catchUp()).rejects.toThrow();
    fake().setEmbeddings('ok');
    expect(await backlog().catchUp()).toBeGreaterThanOrEqual(4);
    const vectors = await t.app.store.listVectors(id, 0, 1000);
    const messages = await t.app.store.listMessages(id, { afterSeq: 0, limit: 1000 });
    const withText = messages.filter((m) => m.role !== 'system' && (m.content ?? '').trim() !== '');
    expect(vectors.map((v) => v.seq)).toEqual(withText.map((m) => m.seq));
  });
});
