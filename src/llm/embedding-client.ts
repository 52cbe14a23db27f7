/**
 * The embedding seam: texts in, unit-length float32 vectors out.
 * `OpenAiEmbeddings` speaks OpenAI's `/v1/embeddings` through the official SDK
 * (OpenAI, Ollama, vLLM, LM Studio and llama.cpp all serve it); the local
 * model lives in `local-embeddings.ts`. A call never retries here: the
 * background embedder tries again later, and a query embedded on the way to
 * a model call falls back to lexical recall instead of waiting.
 */
import OpenAI from 'openai';
import type { EmbedRoleSettings } from '../config/settings.js';
import { CairnError } from '../errors.js';
import { httpFetch } from './http-fetch.js';

/** What one embedding call returned. */
export interface Embedded {
  /** One per input text, in order, each of unit length. */
  vectors: Float32Array[];
  /** Input tokens as the provider counted them (an estimate where it reports none). */
  tokens: number;
  /** The request as sent, for the call's record. */
  request: Readonly<Record<string, unknown>>;
}

export interface EmbeddingClient {
  /** The model name recorded with every vector. */
  readonly model: string;
  embed(texts: readonly string[], options?: { signal?: AbortSignal }): Promise<Embedded>;
  close(): Promise<void>;
}

/** `vector` scaled to unit length in place (a zero vector stays zero); returns it. */
export function normalize(vector: Float32Array): Float32Array {
  let sum = 0;
  for (let i = 0; i < vector.length; i++) sum += vector[i]! * vector[i]!;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < vector.length; i++) vector[i]! /= norm;
  return vector;
}

export class OpenAiEmbeddings implements EmbeddingClient {
  readonly model: string;
  private readonly client: OpenAI;

  constructor(
    private readonly role: EmbedRoleSettings,
    fetchImpl: typeof fetch = httpFetch,
  ) {
    this.model = role.model;
    this.client = new OpenAI({
      // Local servers (Ollama, llama.cpp) accept any key; the SDK insists on one.
      apiKey: role.apiKey ?? 'not-needed',
      baseURL: role.baseURL ?? undefined,
      timeout: role.timeoutMs,
      maxRetries: 0,
      fetch: fetchImpl,
    });
  }

  async embed(texts: readonly string[], options: { signal?: AbortSignal } = {}): Promise<Embedded> {
    const request = {
      model: this.role.model,
      input: [...texts],
      encoding_format: 'float' as const,
      ...(this.role.dimensions !== null ? { dimensions: this.role.dimensions } : {}),
    };
    let answer: OpenAI.CreateEmbeddingResponse;
    try {
      answer = await this.client.embeddings.create(request, {
        ...(options.signal ? { signal: options.signal } : {}),
      });
    } catch (err) {
      throw describeFailure(err, this.role);
    }
    const vectors = [...answer.data]
      .sort((a, b) => a.index - b.index)
      .map((item) => normalize(Float32Array.from(item.embedding)));
    if (vectors.length !== texts.length)
      throw new CairnError(
        'LLM_ERROR',
        `The embedding model returned ${vectors.length} vectors for ${texts.length} texts.`,
      );
    const tokens =
      answer.usage?.prompt_tokens ??
      texts.reduce((sum, text) => sum + Math.ceil(text.length / 4), 0);
    return { vectors, tokens, request };
  }

  async close(): Promise<void> {}
}

function describeFailure(err: unknown, role: EmbedRoleSettings): CairnError {
  if (err instanceof OpenAI.APIConnectionTimeoutError)
    return new CairnError(
      'LLM_TIMEOUT',
      `The embedding model at ${role.baseURL} did not answer within ${role.timeoutMs} ms (models.embed.timeoutMs).`,
      { cause: err },
    );
  if (err instanceof OpenAI.APIError)
    return new CairnError(
      'LLM_ERROR',
      `The embedding model at ${role.baseURL} failed${err.status !== undefined ? ` (${err.status})` : ''}: ${err.message}`,
      { cause: err },
    );
  return new CairnError(
    'LLM_ERROR',
    `The embedding model at ${role.baseURL} could not be reached: ${err instanceof Error ? err.message : String(err)}`,
    { cause: err },
  );
}
