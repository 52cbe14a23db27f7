/**
 * Recall, not the summary, brings facts back: a summariser that keeps only
 * 3 of 20 planted facts, at least 8 rolling compactions, and still each
 * fact is in the model's request when it is asked about by its cue; an
 * unrelated question recalls next to nothing; the fake rejects no request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCompactionEval } from '../../src/eval/compaction-eval.js';
import { generateConversation } from '../../src/eval/planted-facts.js';
import type { ObservedCall } from '../../src/llm/observed-model.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { lossySummarizer } from '../fakes/lossy-summarizer.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { DATABASES, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const SEED = 7;
const FACTS = 20;
const COMPACTIONS = 10;

describe.each(DATABASES)('a lossy summariser with recall (%s)', (database) => {
  let fake: FakeLlmServer;
  let t: TestApp;
  const calls: ObservedCall[] = [];
  const conversation = generateConversation({
    factCount: FACTS,
    compactions: COMPACTIONS,
    seed: SEED,
  });
  const summarizer = lossySummarizer({
    keep: 3,
    facts: conversation.facts.flatMap((f) => [f.statement, ...(f.update ? [f.update] : [])]),
  });

  beforeAll(async () => {
    fake = await startFakeLlmServer({ contextWindowTokens: 16_000 });
    fake.setDefault((body) =>
      isSummaryRequest(body) ? summarizer.reply(body) : { content: 'Noted.' },
    );
    t = await startTestApp({
      database,
      fake,
      agents: {
        assistant: { ...TEST_AGENT, tools: [] },
        forgetful: {
          ...TEST_AGENT,
          name: 'forgetful',
          tools: [],
          defaultCompaction: { recall: { enabled: false } },
        },
      },
      mainModel: { contextWindow: 16_000 },
      app: { observeModelCall: (call) => calls.push(call) },
    });
  });
  afterAll(async () => {
    await t.close();
    await fake.close();
  });

  it('keeps 3 facts in the summary, yet at least 90 % are in the request when probed', async () => {
    const report = await runCompactionEval({
      app: t.app,
      agentName: 'assistant',
      facts: FACTS,
      compactions: COMPACTIONS,
      seed: SEED,
      calls,
      scoreAnswers: false,
    });
    expect(report.compactions).toBeGreaterThanOrEqual(8);
    expect(report.total.keptInSummary).toBeLessThanOrEqual(3);
    expect(report.total.presentWhenProbed / FACTS).toBeGreaterThanOrEqual(0.9);
    // Most of what is present is there by recall alone: not in the raw tail, not in the summary.
    const { inRawTail, keptInSummary, presentWhenProbed, foundOnlyByRecall } = report.total;
    expect(inRawTail + keptInSummary + foundOnlyByRecall).toBeGreaterThanOrEqual(presentWhenProbed);
    expect(foundOnlyByRecall / FACTS).toBeGreaterThanOrEqual(0.5);
    // Asked in other words (only the place shared), the summary still counts, and lexical
    // recall alone finds fewer than by the cue: a match of one word in three is below minScore.
    expect(report.total.presentWhenParaphrased).toBeGreaterThanOrEqual(keptInSummary);
    expect(report.total.foundOnlyByRecallParaphrased).toBeLessThan(foundOnlyByRecall);
    expect(report.unrelatedRecalled).toBeLessThanOrEqual(1);
    expect(report.failedCalls).toBe(0);
    expect(fake.requests.length).toBeGreaterThan(FACTS * 2);
    for (const request of fake.requests) expect(request.problems).toEqual([]);
    expect(summarizer.calls).toBe(report.compactions);
  }, 120_000);

  it('without recall, the same run loses most of the facts', async () => {
    const report = await runCompactionEval({
      app: t.app,
      agentName: 'forgetful',
      facts: FACTS,
      compactions: COMPACTIONS,
      seed: SEED,
      calls,
      scoreAnswers: false,
    });
    expect(report.compactions).toBeGreaterThanOrEqual(8);
    expect(report.total.presentWhenProbed / FACTS).toBeLessThan(0.5);
    expect(report.total.foundOnlyByRecall).toBe(0);
    expect(report.total.foundOnlyByRecallParaphrased).toBe(0);
  }, 120_000);
});
