/**
 * DefaultCompaction built by hand over the app's real store and a real OpenAI
 * adapter pointed at the fake provider, with a tracer of this test's own (the
 * `Tracing` seam records what it is told): the `cairn.compaction` span and the
 * summary call's span beneath it, what a failure puts on the span, and the
 * overflow fallback (`compactMessages`) called directly, so its transcript,
 * its call's scope and its errors are seen exactly.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DefaultCompaction } from '../../src/compaction/default-compaction.js';
import { CairnError } from '../../src/errors.js';
import type { ModelClient } from '../../src/llm/model-client.js';
import { OpenAIModel } from '../../src/llm/openai-model.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { traceModel } from '../../src/telemetry/traced-model.js';
import type { SpanAttributes, SpanStart, TraceSpan, Tracing } from '../../src/telemetry/tracing.js';
import { CONTEXT_OVERFLOW_REPLY, type FakeReply } from '../fakes/llm-server.js';
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

/** What the tracer was told about one span. */
interface RecordedSpan {
  name: string;
  start: SpanStart;
  /** Set after the start. */
  attributes: SpanAttributes;
  failure?: { code: string; message: string };
  ended: boolean;
  handle: TraceSpan;
}

class RecordingTracing implements Tracing {
  readonly captureContent = false;
  readonly spans: RecordedSpan[] = [];
  constructor(readonly enabled = true) {}

  startSpan(name: string, start: SpanStart = {}): TraceSpan {
    const record: RecordedSpan = {
      name,
      start,
      attributes: {},
      ended: false,
      handle: {
        setAttributes: (attributes) => Object.assign(record.attributes, attributes),
        fail: (code, message) => {
          record.failure = { code, message };
        },
        end: () => {
          record.ended = true;
        },
      },
    };
    this.spans.push(record);
    return record.handle;
  }

  async shutdown(): Promise<void> {}

  named(name: string): RecordedSpan[] {
    return this.spans.filter((s) => s.name === name);
  }
}

/** Under the input floor: the summariser's input budget is 4 000 characters. */
const SMALL_WINDOW = 2_000;
const SERVER_ERROR: FakeReply = { status: 500 };
const OVERFLOW = CONTEXT_OVERFLOW_REPLY;

describe('DefaultCompaction with a tracer and a model of its own', () => {
  let t: TestApp;
  let tracing: RecordingTracing;
  let model: ModelClient;
  let compaction: DefaultCompaction;

  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: AGENT } });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    tracing = new RecordingTracing();
    // A generous timeout: the machine may be slow, and no test here waits for one.
    const role = { ...t.app.settings.models.main, contextWindow: SMALL_WINDOW, timeoutMs: 30_000 };
    model = traceModel(new OpenAIModel({ role }), tracing, 'openai');
    compaction = new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      model,
      tracing,
    });
  });

  async function eventsOf(id: string, type: string) {
    const all = await t.app.store.listEvents({ afterId: 0, sessionId: id, limit: 10_000 });
    return all.filter((e) => e.type === type).map((e) => e.data);
  }

  it('puts a compaction in a span under its parent, with what it folded and what it cost, and its summary call beneath', async () => {
    const id = await seedSession(t.app, alternating([100, 100, 100, 100], 'n'), {
      agentName: 'assistant',
      compactCount: 50,
    });
    t.fake!.script({
      content: 'THE SUMMARY',
      usage: { prompt_tokens: 321, completion_tokens: 12 },
    });
    const turn = tracing.startSpan('turn');
    const result = await compaction.run({ sessionId: id, trigger: 'auto', parentSpan: turn });
    expect(result).toMatchObject({
      compactedCount: 2,
      newSize: 2,
      alreadyUpToDate: false,
      input_tokens: 321,
      output_tokens: 12,
    });

    const [span] = tracing.named('cairn.compaction');
    expect(span!.start).toEqual({
      parent: turn,
      attributes: { 'gen_ai.conversation.id': id, 'cairn.compaction.trigger': 'auto' },
    });
    expect(span!.attributes).toEqual({
      'cairn.compaction.messages_folded': 2,
      'cairn.compaction.summary_chars': 'THE SUMMARY'.length,
      'cairn.compaction.compacted_size': 2,
      'cairn.compaction.already_up_to_date': false,
      'gen_ai.usage.input_tokens': 321,
      'gen_ai.usage.output_tokens': 12,
    });
    expect(span!.failure).toBeUndefined();
    expect(span!.ended).toBe(true);

    const calls = tracing.spans.filter((s) => s.name.startsWith('chat '));
    expect(calls).toHaveLength(1);
    expect(calls[0]!.start.parent).toBe(span!.handle);
    expect(calls[0]!.start.attributes).toMatchObject({
      'gen_ai.conversation.id': id,
      'cairn.call.purpose': 'summary',
      'gen_ai.request.temperature': 0,
      'gen_ai.request.max_tokens': Math.ceil(MAX_SUMMARY_CHARS / 3),
    });
  });

  it('a compaction with nothing to fold says so on its span, with no summary call', async () => {
    const id = await seedSession(t.app, [], { agentName: 'assistant', compactCount: 50 });
    const result = await compaction.run({ sessionId: id, trigger: 'manual' });
    expect(result).toMatchObject({ alreadyUpToDate: true });
    const [span] = tracing.named('cairn.compaction');
    expect(span!.start.parent).toBeUndefined();
    expect(span!.attributes).toEqual({
      'cairn.compaction.messages_folded': 0,
      'cairn.compaction.summary_chars': 0,
      'cairn.compaction.compacted_size': 0,
      'cairn.compaction.already_up_to_date': true,
      'gen_ai.usage.input_tokens': 0,
      'gen_ai.usage.output_tokens': 0,
    });
    expect(span!.ended).toBe(true);
    expect(tracing.spans.filter((s) => s.name.startsWith('chat '))).toEqual([]);
  });

  it("a failed summary call fails the span with the error's code and message, and sets nothing else", async () => {
    const id = await seedSession(t.app, alternating([100, 100, 100, 100], 'n'));
    t.fake!.script(SERVER_ERROR);
    const err = await failureOf(compaction.run({ sessionId: id, trigger: 'manual' }));
    // The adapter's own LLM_ERROR, with its message, not a second wrapping of it.
    expect(err.code).toBe('LLM_ERROR');
    expect(err.message).toContain('HTTP 500');
    const [span] = tracing.named('cairn.compaction');
    expect(span!.failure).toEqual({ code: 'LLM_ERROR', message: err.message });
    expect(span!.attributes).toEqual({});
    expect(span!.ended).toBe(true);
  });

  it('a failure that is not a CairnError (the database is gone) fails the span as INTERNAL with its message', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-compaction-'));
    const store = new SqliteStore(path.join(dir, 'cairn.db'));
    try {
      const session = await store.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'System prompt.',
      });
      await store.close();
      const broken = new DefaultCompaction({
        store,
        events: t.app.events,
        agents: t.app.agents,
        model,
        tracing,
      });
      const err = await failureOf(broken.run({ sessionId: session.id, trigger: 'manual' }));
      expect(err).not.toBeInstanceOf(CairnError);
      const [span] = tracing.named('cairn.compaction');
      expect(span!.failure).toEqual({ code: 'INTERNAL', message: err.message });
      expect(span!.ended).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('starts no span when tracing is off, and runs without a tracer at all', async () => {
    const off = new RecordingTracing(false);
    const untraced = new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      model,
      tracing: off,
    });
    const id = await seedSession(t.app, alternating([100, 100, 100, 100], 'n'));
    t.fake!.script({ content: 'FIRST' }, { content: 'SECOND' });
    expect(await untraced.run({ sessionId: id, trigger: 'manual' })).toMatchObject({
      alreadyUpToDate: false,
    });
    expect(off.spans).toEqual([]);

    const bare = new DefaultCompaction({
      store: t.app.store,
      events: t.app.events,
      agents: t.app.agents,
      model,
    });
    expect(await bare.run({ sessionId: id, trigger: 'manual' })).toMatchObject({
      alreadyUpToDate: false,
    });
  });

  it('a reset that lands between planning the cut and loading the batch compacts nothing and fails nothing', async () => {
    const id = await seedSession(t.app, alternating([100, 100, 100, 100], 'n'));
    // The real store, except that a reset lands right after the cut is planned.
    const store = Object.create(t.app.store) as typeof t.app.store;
    store.listMessageMeta = async (sessionId, afterSeq) => {
      const metas = await t.app.store.listMessageMeta(sessionId, afterSeq);
      await t.app.store.resetSession(sessionId);
      return metas;
    };
    const racing = new DefaultCompaction({
      store,
      events: t.app.events,
      agents: t.app.agents,
      model,
      tracing,
    });
    expect(await racing.run({ sessionId: id, trigger: 'manual' })).toMatchObject({
      compactedCount: 0,
      alreadyUpToDate: true,
    });
    expect(summaryRequestsOf(t.fake!)).toEqual([]);
    expect(await t.app.store.findSession(id)).toMatchObject({
      compact_size: 0,
      compact_summary: null,
    });
  });

  describe('the overflow fallback', () => {
    it('folds the newest messages that fit and stops at the first that does not, even if older ones would', async () => {
      const id = await seedSession(t.app, []);
      t.fake!.script({ content: 'FALLBACK' });
      // Entries of ~107, ~2 012, ~1 507 and ~1 512 characters against 4 000: the
      // two newest fit, the second does not, and the small first one must not
      // be folded past it.
      const messages = alternating([100, 2_000, 1_500, 1_500], 'm');
      const summary = await compaction.compactMessages(id, 'assistant', messages, null);
      expect(summary).toBe('FALLBACK');
      const [request] = summaryRequestsOf(t.fake!);
      expect(tagsOf(request!.body, 'm')).toEqual(['m2', 'm3']);
      expect(request!.body.messages[1].content).toContain('Existing summary:\n(none yet)');

      const [call] = tracing.spans.filter((s) => s.name.startsWith('chat '));
      expect(call!.start.attributes).toMatchObject({
        'gen_ai.conversation.id': id,
        'cairn.call.purpose': 'summary',
      });
      expect(await eventsOf(id, 'context.compacted')).toEqual([
        { sessionId: id, messageCount: 4, summaryChars: 'FALLBACK'.length },
      ]);
    });

    it('never asks for a summary of no messages: the newest is folded even when it alone exceeds the budget', async () => {
      const id = await seedSession(t.app, []);
      t.fake!.script({ content: 'ONE' }, { content: 'TWO' });
      const huge = alternating([100, 7_000], 'h');
      await compaction.compactMessages(id, 'assistant', huge, null);
      // A previous summary longer than the whole budget leaves none for messages.
      await compaction.compactMessages(id, 'assistant', huge, text(4_500, 'PREVIOUS'));
      const requests = summaryRequestsOf(t.fake!);
      // Only the newest, clipped to the budget (head and tail kept) so the request fits the window.
      expect(requests.map((r) => tagsOf(r.body, 'h')[0])).toEqual(['h1', 'h1']);
      for (const request of requests) {
        expect(tagsOf(request.body, 'h')).not.toContain('h0');
        expect(JSON.stringify(request.body)).toContain('characters omitted');
      }
    });

    it('keeps the adapter’s LLM_ERROR and LLM_TIMEOUT, and turns any other failure into LLM_ERROR', async () => {
      const id = await seedSession(t.app, []);
      const messages = alternating([100, 100], 'e');

      t.fake!.script(SERVER_ERROR);
      const failed = await failureOf(compaction.compactMessages(id, 'assistant', messages, null));
      expect(failed.code).toBe('LLM_ERROR');
      expect(failed.message).toContain('HTTP 500');

      // The summariser's own context overflow is no overflow of the turn: it is a failed call.
      t.fake!.script(OVERFLOW);
      const overflow = await failureOf(compaction.compactMessages(id, 'assistant', messages, null));
      expect(overflow.code).toBe('LLM_ERROR');
      expect(overflow.message).toBe('The summary model call failed; nothing was changed.');
      expect((overflow.cause as CairnError).code).toBe('CONTEXT_OVERFLOW');
      expect(await eventsOf(id, 'context.compacted')).toEqual([]);
    });

    it('refuses a reply that calls a tool, or whose text is blank', async () => {
      const id = await seedSession(t.app, []);
      const messages = alternating([100, 100], 'e');
      t.fake!.script(
        {
          content: 'A summary, and a call',
          tool_calls: [{ name: 'current_time', arguments: '{}' }],
        },
        { content: ' \n ' },
      );
      for (let i = 0; i < 2; i++) {
        const err = await failureOf(compaction.compactMessages(id, 'assistant', messages, null));
        expect(err.code).toBe('COMPACTION_EMPTY_SUMMARY');
      }
      expect(await eventsOf(id, 'context.compacted')).toEqual([]);
    });
  });
});
