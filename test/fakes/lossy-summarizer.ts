/**
 * A summariser for the fake model that forgets on purpose: of the facts it
 * is told to recognise, it keeps only the last `keep` it finds in a summary
 * request (the previous summary first, then the new messages), and drops
 * everything else. With it, a test can show that what comes back after
 * compaction came back through recall, not through the summary.
 */
import type { FakeReply } from './llm-server.js';

export interface LossySummarizer {
  /** The fake's reply to one summary request. */
  reply(body: { messages?: { role: string; content: unknown }[] }): FakeReply;
  /** Summary requests answered so far. */
  readonly calls: number;
}

export function lossySummarizer(options: {
  keep: number;
  facts: readonly string[];
}): LossySummarizer {
  let calls = 0;
  return {
    get calls() {
      return calls;
    },
    reply(body) {
      calls += 1;
      const text = (body.messages ?? [])
        .filter((m) => m.role === 'user')
        .map((m) => String(m.content))
        .join('\n');
      const found = options.facts
        .map((fact) => ({ fact, at: text.lastIndexOf(fact) }))
        .filter((hit) => hit.at >= 0)
        .sort((a, b) => a.at - b.at)
        .slice(-options.keep)
        .map((hit) => hit.fact);
      return { content: found.length > 0 ? found.join('\n') : 'Nothing worth keeping.' };
    },
  };
}
