/** The context bar: its figures (pure) and what it renders. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { ContextBar } from '../src/components/ContextBar';
import { contextBarModel } from '../src/lib/context-bar';

describe('contextBarModel', () => {
  it('gives each part its share of the window', () => {
    const model = contextBarModel(
      { system: 100, memory: 50, summary: 150, raw: 200, recall: 100, total: 600 },
      1000,
    );
    expect(model.segments.map((s) => [s.key, s.tokens, s.percent])).toEqual([
      ['system', 100, 10],
      ['memory', 50, 5],
      ['summary', 150, 15],
      ['raw', 200, 20],
      ['recall', 100, 10],
    ]);
    expect(model.usedPercent).toBe(60);
    expect(model.over).toBe(false);
  });

  it('treats a missing memory or recall figure (older servers) as 0', () => {
    const model = contextBarModel({ system: 10, summary: 0, raw: 30, total: 40 }, 100);
    expect(model.segments.find((s) => s.key === 'memory')!.tokens).toBe(0);
    expect(model.segments.find((s) => s.key === 'recall')!.tokens).toBe(0);
  });

  it('never draws past the end of the bar when the context is over the window', () => {
    const model = contextBarModel(
      { system: 400, memory: 0, summary: 0, raw: 1600, total: 2000 },
      1000,
    );
    const drawn = model.segments.reduce((sum, s) => sum + s.percent, 0);
    expect(drawn).toBeCloseTo(100);
    expect(model.usedPercent).toBe(200);
    expect(model.over).toBe(true);
  });

  it('survives a zero window without dividing by zero', () => {
    const model = contextBarModel({ system: 0, memory: 0, summary: 0, raw: 0, total: 0 }, 0);
    expect(model.segments.every((s) => Number.isFinite(s.percent))).toBe(true);
    expect(model.usedPercent).toBe(0);
  });
});

describe('<ContextBar>', () => {
  it('renders a meter with the totals and a legend naming each part', () => {
    const html = renderToString(
      <ContextBar
        context={{
          tokens: { system: 1200, memory: 300, summary: 500, raw: 2000, total: 4000 },
          contextWindow: 8000,
        }}
      />,
    );
    expect(html).toContain('role="meter"');
    expect(html).toContain('aria-valuenow="4000"');
    expect(html).toContain('aria-valuemax="8000"');
    expect(html).toContain('4,000 of 8,000 tokens (50%)');
    for (const label of [
      'System: <strong>1,200',
      'Memory: <strong>300',
      'Summary: <strong>500',
      'Raw messages: <strong>2,000',
    ]) {
      expect(html).toContain(label);
    }
    expect(html).toContain('width:15%'); // system: 1200 / 8000
  });

  it('marks a context over the window', () => {
    const html = renderToString(
      <ContextBar
        context={{
          tokens: { system: 10, memory: 0, summary: 0, raw: 200, total: 210 },
          contextWindow: 100,
        }}
      />,
    );
    expect(html).toContain('class="bar over"');
  });
});
