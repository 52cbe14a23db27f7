/**
 * What defaultCompaction sends to the summariser and what follows, checked
 * request by request against the fake OpenAI server over a real SQLite file:
 * the overflow fallback's transcript and the context sent after it, the
 * summariser's input budget net of a long previous summary, loading that stops
 * at the first message that does not fit (messages of different sizes, and a
 * batch of more than one page), a summariser timeout kept as LLM_TIMEOUT, and
 * the events a compaction and its undo emit.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { planCut } from '../../src/compaction/cut.js';
import { NEW_MESSAGES } from '../../src/compaction/prompt.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { SUMMARY_ACK, SUMMARY_PREFIX } from '../../src/runtime/context-builder.js';
import {
  CONTEXT_OVERFLOW_REPLY,
  type FakeReply,
  type RecordedRequest,
} from '../fakes/llm-server.js';
import {
  chatOn,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest, summaryRequestsOf } from './summary-requests.js';

/** The summariser's floor: its input budget is never under 4 000 characters. */
const SMALL_COMPACT_WINDOW = 2_000;
const MAX_SUMMARY_CHARS = 4_000;
const AGENT = {
  ...TEST_AGENT,
  defaultCompaction: { maxSummaryChars: MAX_SUMMARY_CHARS, summaryFormat: 'prose' },
};

const OVERFLOW = CONTEXT_OVERFLOW_REPLY;
const SERVER_ERROR: FakeReply = { status: 500 };

/** A text of exactly `chars` characters starting with `tag`. */
const text = (chars: number, tag: string) => `${tag} `.padEnd(chars, 'x');

const alternating = (sizes: readonly number[], prefix: string): ChatMessage[] =>
  sizes.map((chars, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: text(chars, `${prefix}${i}`),
  }));

/** The transcript half of a summary request's user message, one entry per message. */
function transcriptOf(request: RecordedRequest): string {
  const user = request.body.messages[1].content as string;
  const at = user.indexOf(NEW_MESSAGES);
  expect(at).toBeGreaterThan(0);
  return user.slice(at + NEW_MESSAGES.length);
}

/**
 * The message tags (`n0`, `n1`, …) of a transcript's entries, in order; a
 * line that is not one of the test's messages is returned whole, so it fails
 * the comparison.
 */
function tagsIn(transcript: string, prefix: string): string[] {
  const entry = new RegExp(`^\\[#\\d+ (?:user|assistant)\\] (${prefix}\\d+) x*$`);
  return transcript.split('\n').map((line) => entry.exec(line)?.[1] ?? line);
}

/** Σ characters of a transcript's entries, as a compaction records its input. */
const entryChars = (transcript: string) =>
  transcript.split('\n').reduce((n, line) => n + line.length, 0);

async function eventsOf(t: TestApp, id: string, type: string) {
  const all = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 10_000 });
  return all.filter((e) => e.type === type).map((e) => e.data);
}

describe('defaultCompaction against a small compact-model window', () => {
  let t: TestApp;
  /** Replies of the summariser's calls, in order; then `summaryDefault`. */
  let summaryReplies: FakeReply[];
  let summaryDefault: FakeReply;
  /** The main model overflows until its context carries this text. */
  let fitsWhen: string | undefined;

  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: AGENT },
      compactModel: { contextWindow: SMALL_COMPACT_WINDOW, timeoutMs: 3_000 },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    summaryReplies = [];
    summaryDefault = { content: 'SUMMARY' };
    fitsWhen = undefined;
    t.fake!.setDefault((body: { messages: { role: string; content: unknown }[] }) => {
      if (isSummaryRequest(body)) return summaryReplies.shift() ?? summaryDefault;
      const fits =
        fitsWhen === undefined || body.messages.some((m) => String(m.content).includes(fitsWhen!));
      return fits ? { content: 'ok' } : OVERFLOW;
    });
  });

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  /** A session whose summary is `summary`, with `messages` after it uncompacted. */
  async function summarised(summary: string, messages: ChatMessage[]): Promise<string> {
    const id = await seedSession(t.app, alternating([50, 50], 'seed'), {
      agentName: 'assistant',
      compactCount: 99,
    });
    summaryReplies.push({ content: summary });
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().compactedCount).toBe(2);
    await t.app.store.appendMessages(id, messages);
    // Only what follows is looked at; the replies set above stay.
    t.fake!.requests.splice(0);
    return id;
  }

  it('the overflow fallback summarises every message before the turn, then sends the summary and the turn alone', async () => {
    const id = await seedSession(t.app, alternating([200, 200, 200, 200, 200, 200], 'n'));
    // The compaction that comes first fails, so the fallback runs over all six.
    summaryReplies.push(SERVER_ERROR, { content: 'FALLBACK SUMMARY' });
    fitsWhen = 'FALLBACK SUMMARY';
    const res = await chatOn(t.app, id, 'hello');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().reply).toBe('ok');

    const summaries = summaryRequestsOf(t.fake!);
    expect(summaries).toHaveLength(2);
    const fallback = transcriptOf(summaries[1]!);
    expect(tagsIn(fallback, 'n')).toEqual(['n0', 'n1', 'n2', 'n3', 'n4', 'n5']);

    const last = agentRequestsOf(t.fake!).at(-1)!.body.messages as ChatMessage[];
    expect(last.filter((m) => m.role !== 'system')).toEqual([
      { role: 'user', content: `${SUMMARY_PREFIX}FALLBACK SUMMARY` },
      { role: 'assistant', content: SUMMARY_ACK },
      { role: 'user', content: 'hello' },
    ]);
    expect(await eventsOf(t, id, 'context.compacted')).toEqual([
      { sessionId: id, messageCount: 6, summaryChars: 'FALLBACK SUMMARY'.length },
    ]);
    for (const r of t.fake!.requests) expect(r.problems).toEqual([]);
  });

  it('the overflow fallback keeps the newest messages that fit beside a long previous summary', async () => {
    const previous = text(3_000, 'PREVIOUS');
    const id = await summarised(previous, alternating([400, 400, 400, 400, 400, 400], 'n'));
    summaryReplies.push(SERVER_ERROR, { content: 'FALLBACK SUMMARY' });
    fitsWhen = 'FALLBACK SUMMARY';
    const res = await chatOn(t.app, id, 'hello');
    expect(res.statusCode, res.body).toBe(200);

    const fallback = summaryRequestsOf(t.fake!)[1]!;
    expect(fallback.body.messages[1].content).toContain(`Existing summary:\n${previous}`);
    // 4 000 characters of budget less the 3 000 of the summary: the two newest (~410 each) fit.
    expect(tagsIn(transcriptOf(fallback), 'n')).toEqual(['n4', 'n5']);
    const last = agentRequestsOf(t.fake!).at(-1)!.body.messages as ChatMessage[];
    expect(last.filter((m) => m.role !== 'system')).toEqual([
      { role: 'user', content: `${SUMMARY_PREFIX}FALLBACK SUMMARY` },
      { role: 'assistant', content: SUMMARY_ACK },
      { role: 'user', content: 'hello' },
    ]);
    expect(await eventsOf(t, id, 'context.compacted')).toEqual([
      { sessionId: id, messageCount: 6, summaryChars: 'FALLBACK SUMMARY'.length },
    ]);
  });

  it("a compaction's input budget is net of the previous summary: a shorter batch is compacted", async () => {
    const id = await summarised(
      text(3_000, 'PREVIOUS'),
      alternating([400, 400, 400, 400, 400, 400], 'n'),
    );
    const dry = await inject('POST', `/sessions/${id}/compact`, { dryRun: true });
    expect(dry.statusCode, dry.body).toBe(200);
    expect(dry.json().compactedCount).toBe(2);
    summaryReplies.push({ content: 'SECOND SUMMARY' });
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ compactedCount: 2, newSize: 4, alreadyUpToDate: false });
    expect(tagsIn(transcriptOf(summaryRequestsOf(t.fake!)[0]!), 'n')).toEqual(['n0', 'n1']);

    expect((await eventsOf(t, id, 'context.defaultCompacted')).at(-1)).toEqual({
      sessionId: id,
      compactedCount: 2,
      newSize: 4,
      summaryChars: 'SECOND SUMMARY'.length,
      trigger: 'manual',
    });
    const undo = await inject('POST', `/sessions/${id}/compact/undo`);
    expect(undo.statusCode, undo.body).toBe(200);
    expect(undo.json().restoredSize).toBe(2);
    expect(await eventsOf(t, id, 'context.compactionUndone')).toEqual([
      { sessionId: id, restoredSize: 2 },
    ]);
  });

  it('loading stops at the first message that does not fit, even when later ones would', async () => {
    // 60 % of ~6 800 characters reaches past the large third message; it does
    // not fit the 4 000-character budget, and neither may anything after it.
    const sizes = [300, 300, 3_500, 300, 300, 300, 300, 300, 300, 300, 300];
    const id = await seedSession(t.app, alternating(sizes, 'n'), {
      agentName: 'assistant',
      compactCount: 60,
    });
    const dry = await inject('POST', `/sessions/${id}/compact`, { dryRun: true });
    expect(dry.json().compactedCount).toBe(2);
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().compactedCount).toBe(2);
    const transcript = transcriptOf(summaryRequestsOf(t.fake!)[0]!);
    expect(tagsIn(transcript, 'n')).toEqual(['n0', 'n1']);
    const session = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(session.compact_size).toBe(2);
    const [record] = (await inject('GET', `/sessions/${id}/compactions`)).json().compactions;
    expect(record.input_chars).toBe(entryChars(transcript));
  });

  it('compacts a first message larger than the whole input budget on its own', async () => {
    const id = await seedSession(t.app, alternating([6_000, 100, 100, 100], 'n'), {
      agentName: 'assistant',
      compactCount: 99,
    });
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ compactedCount: 1, alreadyUpToDate: false });
    const transcript = transcriptOf(summaryRequestsOf(t.fake!)[0]!);
    expect(transcript.startsWith('[#')).toBe(true);
    expect(transcript).toContain('] n0 x');
    expect(transcript).not.toContain('] n1 x');
  });

  it('a summariser timeout stays LLM_TIMEOUT and changes nothing', async () => {
    const id = await seedSession(t.app, alternating([100, 100, 100, 100], 'n'));
    summaryReplies.push({ hang: true });
    const res = await inject('POST', `/sessions/${id}/compact`);
    expect(res.statusCode, res.body).toBe(504);
    expect(res.json().error.code).toBe('LLM_TIMEOUT');
    const session = (await inject('GET', `/sessions/${id}`)).json().session;
    expect(session).toMatchObject({ compact_size: 0, compact_summary: null });
  });
});

describe('defaultCompaction over a batch of more than one page', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: AGENT },
      compactModel: { contextWindow: 200_000 },
    });
  });
  afterAll(async () => t.close());

  it('loads the batch page after page, each message once and in order, and no further', async () => {
    const count = 2_400;
    const messages = alternating(new Array<number>(count).fill(12), 'p');
    const id = await seedSession(t.app, messages, { agentName: 'assistant', compactCount: 50 });
    // The planned cut, all of which fits the budget: the second page stops there.
    const planned = planCut(await t.app.store.listMessageMeta(id, 0), 0, 50).cutoff;
    expect(planned).toBeGreaterThan(1_000);
    expect(planned).toBeLessThan(2_000);
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'PAGED SUMMARY' }));
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.statusCode, res.body).toBe(200);
    const compacted = res.json().compactedCount as number;
    expect(compacted).toBe(planned);
    const tags = tagsIn(transcriptOf(summaryRequestsOf(t.fake!)[0]!), 'p');
    expect(tags).toEqual(Array.from({ length: compacted }, (_, i) => `p${i}`));
  });
});

describe('defaultCompaction with a compact-model window above the input floor', () => {
  // (5 000 − ⌈4 000 / 3⌉ − 1 500 reserved) × 3 = 6 498 characters of input.
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: AGENT },
      compactModel: { contextWindow: 5_000 },
    });
  });
  afterAll(async () => t.close());

  it("sizes the summariser's input from the window less the summary's tokens and a reserve", async () => {
    const id = await seedSession(t.app, alternating(new Array<number>(10).fill(1_000), 'n'), {
      agentName: 'assistant',
      compactCount: 99,
    });
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'WINDOW SUMMARY' }));
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.statusCode, res.body).toBe(200);
    // Six entries of ~1 012 characters fit in 6 498; a seventh does not.
    expect(res.json().compactedCount).toBe(6);
    const transcript = transcriptOf(summaryRequestsOf(t.fake!)[0]!);
    expect(tagsIn(transcript, 'n')).toEqual(['n0', 'n1', 'n2', 'n3', 'n4', 'n5']);
  });

  it('loads no message past the cut when the budget is not reached', async () => {
    const id = await seedSession(t.app, alternating(new Array<number>(10).fill(100), 'n'), {
      agentName: 'assistant',
      compactCount: 50,
    });
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'HALF SUMMARY' }));
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().compactedCount).toBe(5);
    const transcript = transcriptOf(summaryRequestsOf(t.fake!)[0]!);
    expect(tagsIn(transcript, 'n')).toEqual(['n0', 'n1', 'n2', 'n3', 'n4']);
    const [record] = (
      await t.app.server.inject({ method: 'GET', url: `/sessions/${id}/compactions` })
    ).json().compactions;
    expect(record.input_chars).toBe(entryChars(transcript));
  });
});
