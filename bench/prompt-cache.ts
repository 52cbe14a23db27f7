/**
 * The prompt-cache row: how much of the input Anthropic would serve from its
 * cache over a long conversation with rolling compactions.
 *
 * One session of the shipped demo agent's shape (auto-compaction at 80 % of
 * an 8 000-token window, so it compacts every few dozen turns), both roles on
 * the Anthropic Messages API against the scripted fake
 * (test/fakes/anthropic-server.ts), which accounts the cache by prefix as the
 * API does: a call reads the longest prefix that ended at a cache breakpoint
 * of an earlier call and writes the rest up to its own last breakpoint;
 * prefixes under 1 024 tokens are not cached. TURNS turns of a few hundred
 * characters each way, in process (`chats.run`).
 *
 * Share = cache_read_input_tokens / all input tokens, over the agent's calls
 * and over every call (the summariser's included: its input is new each time).
 */
import { startFakeAnthropicServer } from '../test/fakes/anthropic-server.js';
import { startBenchApp } from './bench-app.js';

const TURNS = 200;
const CONTEXT_WINDOW_TOKENS = 8_000;
const AIM_SHARE = 0.5;

function isSummaryCall(body: { system?: { text: string }[] }): boolean {
  return (body.system ?? []).some((b) => b.text.includes('rolling summary'));
}

export async function promptCacheRows(): Promise<string[][]> {
  const fake = await startFakeAnthropicServer();
  let turn = 0;
  fake.setDefault((body: { system?: { text: string }[] }) =>
    isSummaryCall(body)
      ? {
          content: `Summary after turn ${turn}: ${'the user and the assistant discussed plans. '.repeat(12)}`,
        }
      : { content: `Answer ${turn}: ${'here is a considered reply with some detail. '.repeat(8)}` },
  );
  const role = {
    provider: 'anthropic',
    baseURL: fake.baseURL,
    model: 'claude-bench',
    maxRetries: 0,
    timeoutMs: 10_000,
    contextWindow: CONTEXT_WINDOW_TOKENS,
  };
  const bench = await startBenchApp(
    {
      name: 'assistant',
      description: 'bench',
      system: `You are a helpful assistant. ${'Answer clearly and concisely, and say so when you are unsure. '.repeat(30)}`,
      tools: ['current_time'],
      maxIterations: 4,
      defaultCompaction: { compactionCount: 50, autoThreshold: 80 },
    },
    { models: { main: role } },
  );
  try {
    let sessionId: string | undefined;
    for (turn = 1; turn <= TURNS; turn++) {
      const result = await bench.app.chats.run({
        agentName: 'assistant',
        message: `Question ${turn}: ${'could you tell me more about the next step of the plan? '.repeat(5)}`,
        ...(sessionId ? { sessionId } : {}),
      });
      sessionId = result.sessionId;
    }
    const rejected = fake.requests.filter((r) => r.problems.length > 0);
    if (rejected.length > 0)
      throw new Error(`prompt-cache bench: the fake refused ${rejected[0]!.problems.join('; ')}`);
    const share = (calls: typeof fake.requests): { share: number; input: number } => {
      let read = 0;
      let input = 0;
      for (const r of calls) {
        if (!r.usage) continue;
        read += r.usage.cache_read_input_tokens;
        input +=
          r.usage.input_tokens +
          r.usage.cache_read_input_tokens +
          r.usage.cache_creation_input_tokens;
      }
      return { share: input === 0 ? 0 : read / input, input };
    };
    const agent = share(fake.requests.filter((r) => !isSummaryCall(r.body)));
    const all = share(fake.requests);
    const session = (await bench.app.store.findSession(sessionId!))!;
    const pct = (x: number): string => `${(100 * x).toFixed(1)} %`;
    return [
      [
        `prompt cache (Anthropic fake, by prefix): share of input tokens read from cache over ${TURNS} turns with ${session.compaction_count} compactions — agent calls / all calls`,
        `${pct(agent.share)} / ${pct(all.share)} (session: ${session.cache_read_tokens.toLocaleString('en-US')} of ${session.input_tokens.toLocaleString('en-US')} input tokens)`,
        `aim: agent calls ≥ ${pct(AIM_SHARE)}`,
        agent.share >= AIM_SHARE ? '✓' : '✗',
      ],
    ];
  } finally {
    await bench.close();
    await fake.close();
  }
}
