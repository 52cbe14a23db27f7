/**
 * The durations agent.json writes as text: a daemon's `every` and a tool's
 * `approvalTimeout` (`30s`, `10m`, `1h`, `2d`).
 */
import { CairnError } from '../errors.js';

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** `30s`, `10m`, `1h`, `2d` → milliseconds; `field` names the setting in the error. */
export function parseDuration(text: string, field: string): number {
  const match = /^([1-9][0-9]*)(s|m|h|d)$/.exec(text);
  if (!match)
    throw new CairnError(
      'VALIDATION_ERROR',
      `${field} "${text}" is not a duration like 30s, 10m, 1h or 2d.`,
    );
  return Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
}

/** A daemon's `every` → milliseconds. */
export function parseEvery(every: string): number {
  return parseDuration(every, 'daemon.every');
}
