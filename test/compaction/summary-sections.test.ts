/**
 * The structured summary: fixed sections, edited in place by each rolling
 * compaction; the offline model writes the same sections extractively;
 * facts stay verbatim; the size cap drops whole items, never the headings;
 * an agent may ask for prose instead.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { summaryRequest, capSummary } from '../../src/compaction/prompt.js';
import {
  capSections,
  EMPTY_SECTIONS_DOCUMENT,
  parseSections,
  renderSections,
  SUMMARY_SECTIONS,
  emptySections,
} from '../../src/compaction/summary-sections.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { OfflineModel } from '../../src/llm/offline-model.js';
import {
  PATIENT_MS,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest } from './summary-requests.js';

describe('summary sections', () => {
  it('render and parse round-trip; an empty section reads "- none"', () => {
    const summary = emptySections();
    summary['Facts and figures'].push('The door code is 4812 (#4)');
    const text = renderSections(summary);
    expect(text).toContain('## Decisions\n- none');
    expect(parseSections(text)).toEqual(summary);
    expect(text.split('\n').filter((l) => l.startsWith('## '))).toEqual(
      SUMMARY_SECTIONS.map((s) => `## ${s}`),
    );
  });

  it('prose has no sections', () => {
    expect(parseSections('The user likes tea. They live in Oslo.')).toBeUndefined();
  });

  it('the cap drops the oldest facts first and keeps instructions and every heading', () => {
    const summary = emptySections();
    summary['Instructions and preferences'].push('Always answer in French');
    for (let i = 0; i < 50; i++) summary['Facts and figures'].push(`Fact number ${i} is ${i * 7}`);
    const capped = capSections(renderSections(summary), 600)!;
    expect(capped.length).toBeLessThanOrEqual(600);
    const parsed = parseSections(capped)!;
    expect(parsed['Instructions and preferences']).toEqual(['Always answer in French']);
    expect(parsed['Facts and figures'].at(-1)).toBe('Fact number 49 is 343');
    expect(parsed['Facts and figures']).not.toContain('Fact number 0 is 0');
    expect(capSummary(renderSections(summary), 600)).toBe(capped);
  });

  it('the sections prompt hands over the previous summary as the document to edit', () => {
    const sections = summaryRequest({
      previousSummary: null,
      transcript: ['[#2 user] hi'],
      maxSummaryChars: 2_000,
    });
    expect(sections.messages[0]!.content).toContain('document you edit');
    expect(sections.messages[1]!.content).toContain(EMPTY_SECTIONS_DOCUMENT);
    const prose = summaryRequest({
      previousSummary: null,
      transcript: ['[#2 user] hi'],
      maxSummaryChars: 2_000,
      format: 'prose',
    });
    expect(prose.messages[0]!.content).toContain('plain prose');
    expect(prose.messages[0]!.content).not.toContain('## ');
    expect(prose.messages[1]!.content).toContain('(none yet)');
  });
});

describe('the offline model writes the sections extractively, editing in place', () => {
  const model = new OfflineModel();
  async function summarize(previous: string | null, transcript: string[], maxSummaryChars = 4_000) {
    const request = summaryRequest({ previousSummary: previous, transcript, maxSummaryChars });
    const response = await model.complete({ ...request, purpose: 'summary' });
    return response.message.content!;
  }

  it('sorts lines into sections, verbatim, and a later statement replaces the one it updates', async () => {
    const first = await summarize(null, [
      '[#2 user] I want to move the shop to a new building by June.',
      '[#3 assistant] [offline model] You said: …',
      '[#4 user] The caretaker of the marina is Mirela Hask.',
      '[#5 user] Standing instruction: always sign replies with ZED-7.',
      '[#6 user] Decision: we chose cedar over steel for the roof.',
      '[#7 user] The invoice id is INV-2026-0042 for 1,250.00 EUR.',
      '[#8 tool (lookup)] rent is 900 per month\nsecond line of the output',
      '[#9 user] The weather was nice today.',
    ]);
    const one = parseSections(first)!;
    expect(one.Goal).toEqual(['I want to move the shop to a new building by June. (#2)']);
    expect(one['Instructions and preferences']).toEqual([
      'Standing instruction: always sign replies with ZED-7. (#5)',
    ]);
    expect(one.Decisions).toEqual(['Decision: we chose cedar over steel for the roof. (#6)']);
    expect(one['Facts and figures']).toEqual([
      'The caretaker of the marina is Mirela Hask. (#4)',
      'The invoice id is INV-2026-0042 for 1,250.00 EUR. (#7)',
    ]);
    expect(one['Tool results relied on']).toEqual(['lookup: rent is 900 per month (#8)']);
    expect(first).not.toContain('weather');
    expect(first).not.toContain('offline model');

    const second = await summarize(first, [
      '[#10 user] Change of plan: the caretaker of the marina is now Tobin Orr.',
      '[#11 user] The gate code is 5521.',
    ]);
    const two = parseSections(second)!;
    expect(two['Facts and figures']).toEqual([
      'Change of plan: the caretaker of the marina is now Tobin Orr. (#10)',
      'The invoice id is INV-2026-0042 for 1,250.00 EUR. (#7)',
      'The gate code is 5521. (#11)',
    ]);
    expect(two['Instructions and preferences']).toEqual(one['Instructions and preferences']);
  });

  it('stays under maxSummaryChars, keeping the newest facts', async () => {
    const transcript = Array.from(
      { length: 200 },
      (_, i) => `[#${i + 2} user] Locker ${i} holds box ${i * 3}.`,
    );
    const summary = await summarize(null, transcript, 1_000);
    expect(summary.length).toBeLessThanOrEqual(1_000);
    expect(summary).toContain('Locker 199 holds box 597.');
    expect(summary).not.toContain('Locker 0 holds');
  });
});

describe('summaryFormat through the app', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        assistant: TEST_AGENT,
        prosy: { ...TEST_AGENT, name: 'prosy', defaultCompaction: { summaryFormat: 'prose' } },
      },
      mainModel: { timeoutMs: PATIENT_MS },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'A summary.' } : { content: 'ok' },
    );
  });
  afterAll(async () => t.close());

  const messages: ChatMessage[] = Array.from({ length: 8 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `message ${i}`,
  }));

  it('sections by default, prose when the agent asks for it', async () => {
    for (const [agentName, expected] of [
      ['assistant', 'document you edit'],
      ['prosy', 'plain prose'],
    ] as const) {
      t.fake!.requests.length = 0;
      const id = await seedSession(t.app, messages, { agentName });
      const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
      expect(res.statusCode).toBe(200);
      const summary = t.fake!.requests.find((r) => isSummaryRequest(r.body))!;
      expect(summary.body.messages[0].content).toContain(expected);
    }
  });
});
