/** The context bar's figures: each part of the next model call against the window. */
import type { ContextTokens } from './types';

export type SegmentKey = 'system' | 'memory' | 'summary' | 'raw' | 'recall';

export interface Segment {
  key: SegmentKey;
  label: string;
  tokens: number;
  /** Share of the bar, 0–100; the parts never add up to more than 100. */
  percent: number;
}

export interface ContextBarModel {
  segments: Segment[];
  total: number;
  window: number;
  /** Share of the window in use, rounded; may exceed 100 when over the window. */
  usedPercent: number;
  over: boolean;
}

const LABELS: Record<SegmentKey, string> = {
  system: 'System',
  memory: 'Memory',
  summary: 'Summary',
  raw: 'Raw messages',
  recall: 'Recalled',
};

export function contextBarModel(tokens: ContextTokens, window: number): ContextBarModel {
  const parts: [SegmentKey, number][] = [
    ['system', tokens.system],
    ['memory', tokens.memory ?? 0],
    ['summary', tokens.summary],
    ['raw', tokens.raw],
    ['recall', tokens.recall ?? 0],
  ];
  // Over the window the bar is full and each part keeps its share of the total.
  const scale = Math.max(window, tokens.total, 1);
  return {
    segments: parts.map(([key, value]) => ({
      key,
      label: LABELS[key],
      tokens: value,
      percent: (Math.max(value, 0) / scale) * 100,
    })),
    total: tokens.total,
    window,
    usedPercent: window > 0 ? Math.round((tokens.total / window) * 100) : 0,
    over: tokens.total > window,
  };
}
