/**
 * DefaultCompaction called directly over the app's real store, with a real
 * OpenAI adapter pointed at the fake provider, for what the HTTP tests leave
 * loose: a closed session, the running turn kept raw, a dry run's sizes,
 * instructions, the compaction record, a compaction that lost the race, undo
 * with nothing to undo, concurrent and sequential runs, an agent that is gone,
 * and transcripts that meet the input budget to the character.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_SUMMARY_CHARS } from '../../src/agents/agent-config.js';
import { DefaultCompaction } from '../../src/compaction/default-compaction.js';
import {
  ADDITIONAL_INSTRUCTIONS,
  SECTIONS_PROMPT_MARKER,
  transcriptEntry,
} from '../../src/compaction/prompt.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { decorateModel } from '../../src/llm/model-client.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import { seedSession, startTestApp, type TestApp } from '../helpers/test-app.js';
import {
  AGENT,
  alternating,
  failureOf,
  MAX_SUMMARY_CHARS,
  tagsOf,
  text,
} from './direct-compaction.js';
import { summaryRequestsOf } from './summary-requests.js';

/** Under the input floor: the summariser's input budget is exactly 4 000 characters. */
const INPUT_BUDGET_CHARS = 4_000;

describe('DefaultCompaction called directly', () => {
  let t: TestApp;
  let compaction: DefaultCompaction;

  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: AGENT } });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'SUMMARY' }));
    // A generous timeout: the machine may be slow, and no test here waits for one.
    compaction = compactionWithWindow(2_000);
  });

  /** A compaction whose summariser has a window of `contextWindow` tokens. */
  const compactionWithWindow = (contextWindow: number) =>
    new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      model: new OpenAIModel({
        role: { ...t.app.settings.models.main, contextWindow, timeoutMs: 30_000 },
      }),
    });
  /** Room for either summary size asked for whole (a small window asks for what fits). */
  const LARGE_WINDOW = 20_000;

  const seeded = (sizes: readonly number[], compactCount = 99) =>
    seedSession(t.app, alternating(sizes, 'n'), { agentName: 'assistant', compactCount });

  it('refuses to compact a closed session', async () => {
    const id = await seeded([100, 100]);
    await t.app.store.closeSession(id);
    const err = await failureOf(compaction.run({ sessionId: id, trigger: 'manual' }));
    expect(err.code).toBe('SESSION_CLOSED');
    expect(err.message).toContain('closed sessions are not compacted');
    expect(summaryRequestsOf(t.fake!)).toEqual([]);
  });

  it('keeps the running turn raw: the cut stays before beforeSeq', async () => {
    const id = await seeded([100, 100, 100, 100, 100, 100]);
    const session = (await t.app.store.findSession(id))!;
    const metas = await t.app.store.listMessageMeta(id, session.compact_seq);
    // The turn starts at the fourth message: only the three before it may go.
    const result = await compaction.run({
      sessionId: id,
      trigger: 'auto',
      beforeSeq: metas[3]!.seq,
    });
    expect(result).toMatchObject({ compactedCount: 3, newSize: 3 });
    expect(tagsOf(summaryRequestsOf(t.fake!)[0]!.body, 'n')).toEqual(['n0', 'n1', 'n2']);
  });

  it('keeps a call a task waits on raw, with all after it, even when its result is stored', async () => {
    // The result is there, so the cut would be tool-safe after it: only the
    // waiting task keeps the call and what follows out of the summary.
    const id = await seedSession(
      t.app,
      [
        { role: 'user', content: text(100, 'n0') },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_wait', type: 'function', function: { name: 'ask_user', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_wait', content: 'The blue one.' },
        ...alternating([100, 100, 100, 100], 'm'),
      ],
      { agentName: 'assistant', compactCount: 99 },
    );
    const dryFree = await compaction.run({ sessionId: id, trigger: 'manual', dryRun: true });
    expect(dryFree).toMatchObject({ compactedCount: 7 });
    const task = await t.app.store.createTask({
      sessionId: id,
      agentName: 'assistant',
      input: 'go',
    });
    const waiting = await t.app.store.transitionTask(task.id, ['running'], {
      status: 'waiting',
      pending_call_id: 'call_wait',
    });
    expect(waiting?.status).toBe('waiting');
    const dry = await compaction.run({ sessionId: id, trigger: 'manual', dryRun: true });
    expect(dry).toMatchObject({ compactedCount: 1, newSize: 1 });
    const result = await compaction.run({ sessionId: id, trigger: 'manual' });
    expect(result).toMatchObject({ compactedCount: 1, newSize: 1 });
    expect(tagsOf(summaryRequestsOf(t.fake!)[0]!.body, 'n')).toEqual(['n0']);
  });

  it("a dry run reports the real run's sizes and calls no model", async () => {
    const id = await seeded([100, 200, 300, 400], 50);
    const dry = await compaction.run({ sessionId: id, trigger: 'manual', dryRun: true });
    // 50 % of 1 000 characters: the first three messages (600).
    expect(dry).toEqual({
      sessionId: id,
      dryRun: true,
      compactedCount: 3,
      newSize: 3,
      batchChars: 600,
      totalChars: 1_000,
    });
    expect(t.fake!.requests).toEqual([]);
    const real = await compaction.run({ sessionId: id, trigger: 'manual' });
    expect(real).toMatchObject({ compactedCount: 3, newSize: 3 });
  });

  it('passes instructions to the summariser and records what the compaction did', async () => {
    const id = await seeded([100, 100, 100, 100]);
    t.fake!.script({
      content: 'RECORDED',
      usage: { prompt_tokens: 77, completion_tokens: 5 },
    });
    await compaction.run({ sessionId: id, trigger: 'auto', instructions: 'Keep the numbers.' });
    const [request] = summaryRequestsOf(t.fake!);
    expect(request!.body.messages[1].content).toContain(
      `${ADDITIONAL_INSTRUCTIONS} Keep the numbers.`,
    );
    const [record] = await t.app.store.listCompactions(id);
    expect(record).toMatchObject({
      from_size: 0,
      to_size: 4,
      summary: 'RECORDED',
      trigger: 'auto',
      model: t.app.settings.models.main.model,
      input_tokens: 77,
      output_tokens: 5,
    });
    const metas = await t.app.store.listMessageMeta(id, 0);
    expect(record!.to_seq).toBe(metas.filter((m) => m.role !== 'system').at(-1)!.seq);
  });

  it('records a summary call whose provider reported no usage as zero tokens', async () => {
    const id = await seeded([100, 100, 100, 100]);
    const inner = new OpenAIModel({ role: { ...t.app.settings.models.main, timeoutMs: 30_000 } });
    const noUsage = new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      // As a provider that sends no usage object is read.
      model: decorateModel(inner, async (request, options) => ({
        ...(await inner.complete(request, options)),
        usage: null,
      })),
    });
    const result = await noUsage.run({ sessionId: id, trigger: 'manual' });
    expect(result).toMatchObject({ compactedCount: 4, input_tokens: 0, output_tokens: 0 });
    const [record] = await t.app.store.listCompactions(id);
    expect(record).toMatchObject({ summary: 'SUMMARY', input_tokens: 0, output_tokens: 0 });
  });

  it('a summary reply with no content at all is an empty summary, never stored', async () => {
    const id = await seeded([100, 100, 100, 100]);
    const inner = new OpenAIModel({ role: { ...t.app.settings.models.main, timeoutMs: 30_000 } });
    const noContent = new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      // As a provider's reply with a null content and no calls is read.
      model: decorateModel(inner, async (request, options) => {
        const response = await inner.complete(request, options);
        return { ...response, message: { ...response.message, content: null } };
      }),
    });
    const err = await failureOf(noContent.run({ sessionId: id, trigger: 'manual' }));
    expect(err.code).toBe('COMPACTION_EMPTY_SUMMARY');
    expect(await t.app.store.findSession(id)).toMatchObject({
      compact_size: 0,
      compact_summary: null,
    });
  });

  it('a compaction that lost the race fails with COMPACTION_CONFLICT and changes nothing of its own', async () => {
    const id = await seeded([100, 100, 100, 100]);
    // The real store, except that another compaction lands while this one plans.
    const store = Object.create(t.app.store) as typeof t.app.store;
    store.listMessageMeta = async (sessionId, afterSeq) => {
      const metas = await t.app.store.listMessageMeta(sessionId, afterSeq);
      const landed = await t.app.store.commitCompaction({
        sessionId,
        expectedSize: 0,
        toSize: 1,
        toSeq: metas.find((m) => m.role !== 'system')!.seq,
        summary: 'OTHER',
        trigger: 'manual',
        model: 'other',
        inputChars: 1,
      });
      expect(landed).toBeTruthy();
      return metas;
    };
    const racing = new DefaultCompaction({
      store,
      events: t.app.events,
      agents: t.app.agents,
      model: new OpenAIModel({ role: { ...t.app.settings.models.main, timeoutMs: 30_000 } }),
    });
    const err = await failureOf(racing.run({ sessionId: id, trigger: 'manual' }));
    expect(err.code).toBe('COMPACTION_CONFLICT');
    expect(err.message).toContain('compacted or reset by someone else');
    expect(await t.app.store.findSession(id)).toMatchObject({
      compact_size: 1,
      compact_summary: 'OTHER',
    });
  });

  it('undo with nothing to undo is a conflict', async () => {
    const id = await seeded([100, 100]);
    const err = await failureOf(compaction.undo(id));
    expect(err.code).toBe('COMPACTION_CONFLICT');
    expect(err.message).toContain('Nothing to undo');
  });

  it('concurrent runs share one summary call; a later run is a compaction of its own', async () => {
    const id = await seeded([100, 100, 100, 100], 50);
    const [a, b] = await Promise.all([
      compaction.run({ sessionId: id, trigger: 'manual' }),
      compaction.run({ sessionId: id, trigger: 'manual' }),
    ]);
    expect(b).toBe(a);
    expect(a).toMatchObject({ compactedCount: 2, newSize: 2 });
    expect(summaryRequestsOf(t.fake!)).toHaveLength(1);
    // A dry run meanwhile is answered on its own, never from the flight.
    const [c, dry] = await Promise.all([
      compaction.run({ sessionId: id, trigger: 'manual' }),
      compaction.run({ sessionId: id, trigger: 'manual', dryRun: true }),
    ]);
    // 50 % of the two left and the 7-character summary: both.
    expect(c).toMatchObject({ alreadyUpToDate: false, newSize: 4 });
    expect(dry).toMatchObject({ dryRun: true, compactedCount: 2 });
    expect(summaryRequestsOf(t.fake!)).toHaveLength(2);
  });

  it('an agent that is gone is compacted with the default size and format', async () => {
    compaction = compactionWithWindow(LARGE_WINDOW);
    const id = await seeded([]);
    const messages = alternating([100, 100], 'g');
    await compaction.compactMessages(id, 'gone', messages, null);
    await compaction.compactMessages(id, 'assistant', messages, null);
    const [gone, assistant] = summaryRequestsOf(t.fake!);
    expect(gone!.body.max_tokens).toBe(Math.ceil(DEFAULT_MAX_SUMMARY_CHARS / 3));
    expect(gone!.body.messages[0].content).toContain(SECTIONS_PROMPT_MARKER);
    expect(assistant!.body.max_tokens).toBe(Math.ceil(MAX_SUMMARY_CHARS / 3));
    expect(assistant!.body.messages[0].content).not.toContain(SECTIONS_PROMPT_MARKER);
    expect(assistant!.body.messages[0].content).toContain('Write plain prose paragraphs.');
  });

  it('a compaction of a session whose agent is gone uses the defaults too', async () => {
    compaction = compactionWithWindow(LARGE_WINDOW);
    const session = await t.app.store.createSession({
      agentName: 'gone',
      mode: 'chat',
      compactCount: 99,
      systemPrompt: 'System prompt.',
    });
    await t.app.store.appendMessages(session.id, alternating([100, 100], 'g'));
    await compaction.run({ sessionId: session.id, trigger: 'manual' });
    const [request] = summaryRequestsOf(t.fake!);
    expect(request!.body.max_tokens).toBe(Math.ceil(DEFAULT_MAX_SUMMARY_CHARS / 3));
    expect(request!.body.messages[0].content).toContain(SECTIONS_PROMPT_MARKER);
  });

  it('folds a batch whose transcript is exactly the input budget, and not one character more', async () => {
    const id = await seeded([1_000]);
    const [first] = await t.app.store
      .listTail(id, 0, 10)
      .then((m) => m.filter((x) => x.role === 'user'));
    const firstChars = transcriptEntry(first!).length;
    const label = `[#${first!.seq + 1} assistant] `.length;
    await t.app.store.appendMessages(id, [
      { role: 'assistant', content: text(INPUT_BUDGET_CHARS - firstChars - label, 'n1') },
      ...alternating([100, 100], 'r'),
    ]);
    const loaded = await t.app.store.listTail(id, first!.seq - 1, 2);
    expect(loaded.map((m) => transcriptEntry(m).length).reduce((a, b) => a + b)).toBe(
      INPUT_BUDGET_CHARS,
    );
    const result = await compaction.run({ sessionId: id, trigger: 'manual' });
    expect(result).toMatchObject({ compactedCount: 2 });
    expect(tagsOf(summaryRequestsOf(t.fake!)[0]!.body, 'n')).toEqual(['n0', 'n1']);
  });

  it('the overflow fallback folds messages whose entries are exactly the budget', async () => {
    const id = await seeded([]);
    // Entries without a seq: "[user] …" and "[assistant] …".
    const messages: ChatMessage[] = [
      { role: 'user', content: text(1_000 - '[user] '.length, 'f0') },
      {
        role: 'assistant',
        content: text(INPUT_BUDGET_CHARS - 1_000 - '[assistant] '.length, 'f1'),
      },
    ];
    expect(messages.map((m) => transcriptEntry(m).length)).toEqual([1_000, 3_000]);
    await compaction.compactMessages(id, 'assistant', messages, null);
    expect(tagsOf(summaryRequestsOf(t.fake!)[0]!.body, 'f')).toEqual(['f0', 'f1']);
  });
});
