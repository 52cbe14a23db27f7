/**
 * Memory over thousands of model calls, against the scripted fake provider
 * with the real `openai` client: nothing is retained per call. The client
 * adds an abort listener to the signal it is given and never removes it; a
 * signal combined per call with `AbortSignal.any` and never aborted is kept
 * alive by such a listener, with its controller and sources (about 2.4 KB a
 * call). The heap after a few thousand calls, collected, must stay where it
 * was after the warm-up.
 */
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelRoleSettings } from '../../src/config/settings.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';

setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

// The first thousand or so calls grow the heap on their own (compiled code, connection pools).
const WARM_UP = 1_500;
const CALLS = 3_000;
/** Bounded growth: well under what 2.4 KB a call would add (over 7 MB). */
const MAX_GROWTH_BYTES = 2 * 1024 * 1024;

function heapUsed(): number {
  collect();
  collect();
  return process.memoryUsage().heapUsed;
}

describe('model calls and memory', () => {
  let fake: FakeLlmServer;
  let model: OpenAIModel;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    answerOk();
    const role: ModelRoleSettings = {
      provider: 'openai',
      baseURL: fake.baseURL,
      model: 'm',
      apiKeyEnv: 'X',
      apiKey: 'sk-test',
      contextWindow: 8192,
      timeoutMs: 5_000,
      maxRetries: 0,
      profile: 'openai',
    };
    model = new OpenAIModel({ role, logger: { warn: () => undefined } });
  });
  afterAll(async () => fake.close());

  /** The fake records every request in this process: forgotten before each measure. */
  function answerOk(): void {
    fake.reset();
    fake.setDefault(() => ({ content: 'ok' }));
  }

  /** One call as a turn makes it: with the turn's own signal, which never aborts. */
  async function call(i: number): Promise<void> {
    const turn = new AbortController();
    const request = {
      messages: [{ role: 'user' as const, content: `hi ${i}` }],
      purpose: 'chat' as const,
    };
    if (i % 2 === 0) await model.complete(request, { signal: turn.signal });
    else await model.complete(request, { signal: turn.signal, onDelta: () => undefined });
  }

  it('a few thousand calls, streamed and not, leave the heap where the warm-up left it', async () => {
    for (let i = 0; i < WARM_UP; i++) await call(i);
    answerOk();
    const before = heapUsed();
    for (let i = 0; i < CALLS; i++) {
      await call(i);
      if (i % 100 === 99) answerOk();
    }
    answerOk();
    const growth = heapUsed() - before;
    expect(growth).toBeLessThan(MAX_GROWTH_BYTES);
  }, 120_000);
});
