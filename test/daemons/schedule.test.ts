/**
 * Daemon schedules as pure functions: `every` durations and cron expressions
 * (croner) → the next run after a given time; the slot after a tick, timed
 * from the slot it ran, with the slots it ran past counted.
 */
import { describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import { CairnError } from '../../src/errors.js';
import { nextRunAfter, nextSlot } from '../../src/runtime/daemon-scheduler.js';
import { parseEvery } from '../../src/runtime/duration.js';

function agentWith(daemon?: AgentConfig['daemon']): AgentConfig {
  return {
    name: 'sched',
    description: '',
    system: 'You run on a schedule.',
    tools: [],
    toolsNeedingApproval: [],
    maxIterations: 3,
    autoTitle: false,
    memory: { enabled: false, maxChars: 4000, write: true },
    defaultCompaction: {
      compactCount: 50,
      autoThreshold: 80,
      prepareAt: 60,
      maxSummaryChars: 12_000,
      summaryFormat: 'sections',
      pruneToolResults: { keepLast: 3, minTokens: 400 },
      recall: {
        enabled: true,
        maxMessages: 6,
        maxTokens: 1_200,
        minScore: 0.5,
        minRelativeScore: 0.4,
      },
    },
    ...(daemon ? { daemon } : {}),
    dir: '/nonexistent',
  };
}

describe('parseEvery', () => {
  it.each([
    ['1s', 1_000],
    ['30s', 30_000],
    ['10m', 600_000],
    ['1h', 3_600_000],
    ['36h', 129_600_000],
    ['2d', 172_800_000],
  ])('%s is %d ms', (every, ms) => {
    expect(parseEvery(every)).toBe(ms);
  });

  it.each(['0s', '00m', '1.5h', '10', 'h', '10min', '500ms', '1w', '-1s', ' 1s', '1s ', '', '1H'])(
    'refuses %j with VALIDATION_ERROR',
    (every) => {
      let error: unknown;
      try {
        parseEvery(every);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(CairnError);
      expect((error as CairnError).code).toBe('VALIDATION_ERROR');
      expect((error as CairnError).message).toContain(JSON.stringify(every).slice(1, -1));
    },
  );
});

describe('nextRunAfter', () => {
  const from = new Date(2024, 0, 1, 10, 7, 30); // local time, as cron reads it

  it('adds the `every` interval to the given time', () => {
    expect(nextRunAfter(agentWith({ every: '10m', prompt: 'p' }), from)).toEqual(
      new Date(from.getTime() + 600_000),
    );
    expect(nextRunAfter(agentWith({ every: '1s', prompt: 'p' }), from)).toEqual(
      new Date(from.getTime() + 1_000),
    );
  });

  it('finds the next cron slot strictly after the given time', () => {
    const quarter = agentWith({ cron: '*/15 * * * *', prompt: 'p' });
    expect(nextRunAfter(quarter, from)).toEqual(new Date(2024, 0, 1, 10, 15, 0));
    // Exactly on a slot: the next one, never the same instant again.
    expect(nextRunAfter(quarter, new Date(2024, 0, 1, 10, 15, 0))).toEqual(
      new Date(2024, 0, 1, 10, 30, 0),
    );
    // 09:00 on weekdays, asked on Friday 5 January 2024 after nine: Monday.
    const weekdays = agentWith({ cron: '0 9 * * 1-5', prompt: 'p' });
    expect(nextRunAfter(weekdays, new Date(2024, 0, 5, 9, 30))).toEqual(
      new Date(2024, 0, 8, 9, 0, 0),
    );
  });

  it('is null for an agent without a schedule', () => {
    expect(nextRunAfter(agentWith(), from)).toBeNull();
  });

  it('throws on an invalid cron expression or duration', () => {
    expect(() => nextRunAfter(agentWith({ cron: 'every tuesday', prompt: 'p' }), from)).toThrow();
    expect(() => nextRunAfter(agentWith({ every: '5 minutes', prompt: 'p' }), from)).toThrow(
      CairnError,
    );
  });
});

describe('nextSlot', () => {
  const slot = new Date(2024, 0, 1, 10, 0, 0);
  const at = (minutes: number, seconds = 0): Date =>
    new Date(slot.getTime() + minutes * 60_000 + seconds * 1_000);
  const tenMinutes = agentWith({ every: '10m', prompt: 'p' });

  it('times `every` from the start of the slot, not from when its tick ended', () => {
    // A tick of 3 minutes: the next slot is still 10 minutes after the last one began.
    expect(nextSlot(tenMinutes, slot, at(3))).toEqual({ next: at(10), skipped: 0 });
    expect(nextSlot(tenMinutes, slot, slot)).toEqual({ next: at(10), skipped: 0 });
    // A timer a hair early (now before the slot) still aims one interval on.
    expect(nextSlot(tenMinutes, slot, at(0, -1))).toEqual({ next: at(10), skipped: 0 });
  });

  it('skips, and counts, the slots a tick ran past; never one already past', () => {
    expect(nextSlot(tenMinutes, slot, at(10))).toEqual({ next: at(20), skipped: 1 });
    expect(nextSlot(tenMinutes, slot, at(25))).toEqual({ next: at(30), skipped: 2 });
  });

  it('does the same on a cron schedule', () => {
    const quarter = agentWith({ cron: '*/15 * * * *', prompt: 'p' });
    expect(nextSlot(quarter, slot, at(5))).toEqual({ next: at(15), skipped: 0 });
    expect(nextSlot(quarter, slot, at(40))).toEqual({ next: at(45), skipped: 2 });
  });

  it('is null, with nothing skipped, for an agent without a schedule', () => {
    expect(nextSlot(agentWith(), slot, at(40))).toEqual({ next: null, skipped: 0 });
  });
});
