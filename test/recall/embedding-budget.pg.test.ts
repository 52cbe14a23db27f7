/**
 * Embedding calls reserve against the session owner key's tokensPerDay, on
 * both store dialects, with the fake provider's `/v1/embeddings`: the
 * background walk never spends past a key's day and goes on embedding other
 * keys' messages, asks again for the passed-over ones later; a query whose
 * embedding the key cannot cover leaves that call's recall lexical without
 * pausing hybrid recall for anyone else.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { KeyReservations } from '../../src/coordination/key-reservations.js';
import { OpenAiEmbeddings } from '../../src/llm/embedding-client.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { Embedder } from '../../src/recall/embedder.js';
import { BUDGET_RETRY_MS, EmbeddingBacklog } from '../../src/recall/embedding-backlog.js';
import { VectorRecall, type RecallDegradedReason } from '../../src/recall/hybrid-recall.js';
import { usageDay } from '../../src/store/records.js';
import { DATABASES, startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'embed-budget-admin';
/** Each message is about 20 tokens: a session of two costs about 40, and a day of 100 covers two such calls, not three. */
const TIGHT_DAY = 100;
const FACT = 'The deploy key rotates every 90 days, on the first Monday of the quarter.';
const PARAPHRASE = 'How often do we change the deploy credentials?';

function pair(topic: string): ChatMessage[] {
  return [
    { role: 'user', content: `Tell me something about ${topic}, in one sentence please.` },
    { role: 'assistant', content: `Here is one sentence about ${topic}, as you asked me.` },
  ];
}

describe.each(DATABASES)('embedding calls reserve on the owner key (%s)', (database) => {
  let t: TestApp;
  const today = () => usageDay(new Date().toISOString());
  const embedRequests = () => t.fake!.requests.filter((r) => r.path === '/v1/embeddings');
  const embedded = (id: string) => t.app.store.listVectors(id, 0, 100);

  beforeAll(async () => {
    t = await startTestApp({ database, server: { apiKey: ADMIN_KEY }, embedModel: {} });
    // The tests walk the backlog themselves.
    await t.app.embeddingBacklog!.close();
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setEmbeddings('ok');
  });

  async function issue(name: string, limits: Record<string, number>) {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/keys',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { name, limits },
    });
    expect(res.statusCode, res.body).toBe(201);
    const { secret, key } = res.json<{ secret: string; key: { id: string } }>();
    return { secret, id: key.id };
  }

  async function sessionOf(secret: string, messages: ChatMessage[]): Promise<string> {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      headers: { authorization: `Bearer ${secret}` },
      payload: { agentName: 'assistant' },
    });
    expect(res.statusCode, res.body).toBe(201);
    const id = res.json<{ session: { id: string } }>().session.id;
    await t.app.store.appendMessages(id, messages);
    return id;
  }

  function ownBacklog(now: () => number) {
    const role = t.app.settings.models.embed!;
    const embedder = new Embedder({
      client: new OpenAiEmbeddings(role),
      role,
      recorder: { noteEmbedding: () => null },
      store: t.app.store,
      budget: new KeyReservations({ store: t.app.store, instanceId: t.app.instanceId }),
    });
    return {
      embedder,
      backlog: new EmbeddingBacklog({ store: t.app.store, embedder, warn: () => {}, now }),
    };
  }

  it("the backlog stays within a tight key's day and still embeds the other keys' messages", async () => {
    const tight = await issue('tight', { tokensPerDay: TIGHT_DAY });
    const roomy = await issue('roomy', {});
    // Interleaved, so the tight key's refusals fall between the others' messages.
    const sessions: { key: string; id: string }[] = [];
    for (const topic of ['tea', 'rain', 'boats', 'maps', 'owls']) {
      sessions.push({ key: tight.id, id: await sessionOf(tight.secret, pair(topic)) });
      sessions.push({ key: roomy.id, id: await sessionOf(roomy.secret, pair(`${topic}!`)) });
    }
    // Through the app's own walk: the wiring reserves too.
    await t.app.embeddingBacklog!.catchUp();

    const spent = await t.app.store.keyTokensOn(tight.id, today());
    expect(spent).toBeGreaterThan(0);
    expect(spent).toBeLessThanOrEqual(TIGHT_DAY);
    const tightDone = [];
    for (const s of sessions.filter((s) => s.key === tight.id))
      tightDone.push((await embedded(s.id)).length);
    // Some of its sessions were embedded, the rest were passed over without a call.
    expect(tightDone.filter((n) => n === 2).length).toBeGreaterThan(0);
    expect(tightDone.filter((n) => n === 0).length).toBeGreaterThan(0);
    expect(embedRequests()).toHaveLength(5 + tightDone.filter((n) => n === 2).length);
    for (const s of sessions.filter((s) => s.key === roomy.id))
      expect(await embedded(s.id)).toHaveLength(2);
    expect(await t.app.store.keyTokensOn(roomy.id, today())).toBeGreaterThan(0);
  });

  it('asks again for a passed-over key after a while, and embeds once the key has room', async () => {
    const key = await issue('later', { tokensPerDay: 10 });
    const first = await sessionOf(key.secret, pair('clouds'));
    let clock = Date.now();
    const { backlog } = ownBacklog(() => clock);
    await backlog.catchUp();
    expect(await embedded(first)).toEqual([]);
    // Refused before the call: the provider never saw the key's messages.
    const asked = () => embedRequests().filter((r) => JSON.stringify(r.body).includes('clouds'));
    expect(asked()).toEqual([]);

    const patched = await t.app.server.inject({
      method: 'PATCH',
      url: `/keys/${key.id}`,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { limits: { tokensPerDay: 10_000 } },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    // Not yet: the walk is past those messages until the wait is over.
    await backlog.catchUp();
    expect(await embedded(first)).toEqual([]);
    clock += BUDGET_RETRY_MS + 1;
    await backlog.catchUp();
    expect(await embedded(first)).toHaveLength(2);
    expect(asked()).toHaveLength(1);
    expect(await t.app.store.keyTokensOn(key.id, today())).toBeGreaterThan(0);
  });

  it("a query the key cannot cover is lexical for that call; other keys' queries stay hybrid", async () => {
    const spentKey = await issue('spent', { tokensPerDay: 5 });
    const freeKey = await issue('free', {});
    const facts: ChatMessage[] = [
      { role: 'user', content: FACT },
      { role: 'assistant', content: 'Noted.' },
    ];
    const spentSession = await sessionOf(spentKey.secret, facts);
    const freeSession = await sessionOf(freeKey.secret, facts);
    const { embedder } = ownBacklog(() => Date.now());
    // Vectors for both sessions (written with the unlimited admin's budget: the test's setup).
    await new EmbeddingBacklog({
      store: t.app.store,
      embedder: new Embedder({
        client: new OpenAiEmbeddings(t.app.settings.models.embed!),
        role: t.app.settings.models.embed!,
        recorder: { noteEmbedding: () => null },
        store: t.app.store,
      }),
      warn: () => {},
    }).catchUp();
    t.fake!.reset();
    // The setup's walk charged the owner keys for their vectors: what a refusal must not add to.
    const spentBefore = await t.app.store.keyTokensOn(spentKey.id, today());
    expect(spentBefore).toBeGreaterThan(5);

    const degraded: RecallDegradedReason[] = [];
    const warnings: string[] = [];
    const recall = new VectorRecall({
      store: t.app.store,
      embedder,
      warn: (_details, message) => warnings.push(message),
      degraded: (reason) => degraded.push(reason),
    });
    const sessionRow = async (id: string) => (await t.app.store.findSession(id))!;

    const refused = await recall.candidates(await sessionRow(spentSession), PARAPHRASE, 10, 5);
    expect(refused).toBeUndefined();
    expect(degraded).toEqual(['embed_budget']);
    expect(embedRequests()).toEqual([]);
    expect(await t.app.store.keyTokensOn(spentKey.id, today())).toBe(spentBefore);

    // Right after: another key's query is embedded and searched (nothing was paused).
    const found = await recall.candidates(await sessionRow(freeSession), PARAPHRASE, 10, 5);
    expect(found?.map((hit) => hit.seq)).toContain(2);
    expect(degraded).toEqual(['embed_budget']);
    expect(warnings).toEqual([]);
    expect(embedRequests()).toHaveLength(1);
    expect(await t.app.store.keyTokensOn(freeKey.id, today())).toBeGreaterThan(spentBefore);
  });
});
