/**
 * `provider: "local"`: the bundled sentence encoder runs in a worker thread
 * from the optional package's own weights (no network), returns unit
 * vectors of 512 dimensions, and puts a paraphrase nearer than an unrelated
 * sentence; the event loop stays free while it works.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { LocalEmbeddings, resolveLocalModel } from '../../src/llm/local-embeddings.js';

const dot = (a: Float32Array, b: Float32Array) => a.reduce((s, x, i) => s + x * b[i]!, 0);

describe('LocalEmbeddings', () => {
  const local = new LocalEmbeddings(resolveLocalModel(), 60_000);
  afterAll(() => local.close());

  it('embeds in a worker: unit vectors, paraphrase nearer than an unrelated text', async () => {
    let ticks = 0;
    const timer = setInterval(() => (ticks += 1), 1);
    const { vectors, tokens } = await local.embed([
      'How often do we change the deploy credentials?',
      'The deploy key rotates every 90 days.',
      'I had pizza with extra cheese for lunch.',
    ]);
    clearInterval(timer);
    expect(vectors).toHaveLength(3);
    for (const v of vectors) {
      expect(v).toHaveLength(512);
      expect(dot(v, v)).toBeCloseTo(1, 4);
    }
    expect(dot(vectors[0]!, vectors[1]!)).toBeGreaterThan(dot(vectors[0]!, vectors[2]!) + 0.2);
    expect(tokens).toBeGreaterThan(0);
    // The model loaded and ran off the event loop: timers kept firing meanwhile.
    expect(ticks).toBeGreaterThan(0);
  });
});
