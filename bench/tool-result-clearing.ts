/**
 * The tool-result clearing rows: prompt tokens and the share of them read
 * from the prompt cache over a tool-heavy conversation, with old tool
 * results cleared (the default) and without (`pruneToolResults: false`).
 *
 * TURNS turns, each a question, one call of a tool that returns a report of
 * about 600 tokens, and an answer; both roles on the Anthropic Messages API
 * against the scripted fake (test/fakes/anthropic-server.ts), which accounts
 * the cache by prefix as the API does. The window is 32 000 tokens with the
 * default automatic compaction (80 %), so the conversation without clearing
 * outgrows it and compacts, as a real one would. Prompt tokens are every
 * input token of the agent's calls (cache reads and writes included).
 */
import { startFakeAnthropicServer } from '../test/fakes/anthropic-server.js';
import { startBenchApp } from './bench-app.js';

const TURNS = 50;
const CONTEXT_WINDOW_TOKENS = 32_000;

/** About 600 tokens (" data" is one token), with a line of its own per report. */
const REPORT_TOOL = `export default {
  name: 'read_report',
  description: 'Reads one report.',
  parameters: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
  async run(args) {
    return 'Report ' + args.n + ': figures for week ' + args.n + '.' + ' data'.repeat(600);
  },
};
`;

function isSummaryCall(body: { system?: { text: string }[] }): boolean {
  return (body.system ?? []).some((b) => b.text.includes('rolling summary'));
}

/** The last message of a request ends with a tool result: time to answer. */
function answersTool(body: { messages: { content: unknown }[] }): boolean {
  const last = body.messages.at(-1)?.content;
  return Array.isArray(last) && last.some((b: { type?: string }) => b.type === 'tool_result');
}

interface Run {
  promptTokens: number;
  cacheShare: number;
  compactions: number;
}

async function conversation(pruneToolResults: boolean): Promise<Run> {
  const fake = await startFakeAnthropicServer();
  let turn = 0;
  fake.setDefault((body: { system?: { text: string }[]; messages: { content: unknown }[] }) => {
    if (isSummaryCall(body)) {
      return { content: `Summary after turn ${turn}: ${'reports were read. '.repeat(20)}` };
    }
    if (answersTool(body)) return { content: `Report ${turn} read: the figures look steady.` };
    return { tool_calls: [{ name: 'read_report', arguments: JSON.stringify({ n: turn }) }] };
  });
  const bench = await startBenchApp(
    {
      name: 'analyst',
      description: 'bench',
      system: `You read reports. ${'Answer clearly and concisely, and say so when you are unsure. '.repeat(30)}`,
      tools: ['./tools/report.js'],
      maxIterations: 4,
      defaultCompaction: pruneToolResults ? {} : { pruneToolResults: false },
    },
    {
      models: {
        main: {
          provider: 'anthropic',
          baseURL: fake.baseURL,
          model: 'claude-bench',
          maxRetries: 0,
          timeoutMs: 10_000,
          contextWindow: CONTEXT_WINDOW_TOKENS,
        },
      },
    },
    { 'tools/report.js': REPORT_TOOL },
  );
  try {
    let sessionId: string | undefined;
    for (turn = 1; turn <= TURNS; turn++) {
      const result = await bench.app.chats.run({
        agentName: 'analyst',
        message: `Please read report ${turn} and tell me how it looks.`,
        ...(sessionId ? { sessionId } : {}),
      });
      sessionId = result.sessionId;
    }
    const rejected = fake.requests.filter((r) => r.problems.length > 0);
    if (rejected.length > 0)
      throw new Error(`clearing bench: the fake refused ${rejected[0]!.problems.join('; ')}`);
    let read = 0;
    let input = 0;
    for (const r of fake.requests) {
      if (!r.usage || isSummaryCall(r.body)) continue;
      read += r.usage.cache_read_input_tokens;
      input +=
        r.usage.input_tokens +
        r.usage.cache_read_input_tokens +
        r.usage.cache_creation_input_tokens;
    }
    const session = (await bench.app.store.findSession(sessionId!))!;
    return {
      promptTokens: input,
      cacheShare: input === 0 ? 0 : read / input,
      compactions: session.compaction_count,
    };
  } finally {
    await bench.close();
    await fake.close();
  }
}

export async function toolResultClearingRows(): Promise<string[][]> {
  const whole = await conversation(false);
  const cleared = await conversation(true);
  const pct = (x: number): string => `${(100 * x).toFixed(1)} %`;
  const tokens = (x: number): string => x.toLocaleString('en-US');
  const describe = (run: Run): string =>
    `${tokens(run.promptTokens)} prompt tokens, ${pct(run.cacheShare)} read from cache, ${run.compactions} compactions`;
  return [
    [
      `tool-heavy conversation (${TURNS} turns, a ~600-token tool result each, Anthropic fake, ${tokens(CONTEXT_WINDOW_TOKENS)}-token window): old tool results kept whole`,
      describe(whole),
      '— (the baseline)',
      '',
    ],
    [
      `the same with old tool results cleared (default keepLast 3, minTokens 400, in batches)`,
      describe(cleared),
      'fewer prompt tokens than kept whole',
      cleared.promptTokens < whole.promptTokens ? '✓' : '✗',
    ],
  ];
}
