/**
 * A manual compaction for people: the one line `cairn compact` and the chat's
 * `/compact` print for the server's result (the whole JSON is `--json`'s).
 */
import { request, type ClientOptions } from './client.js';

export interface CompactRequest {
  dryRun?: boolean;
  undo?: boolean;
  instructions?: string;
}

interface SessionCounts {
  compact_size: number;
  compaction_count: number;
  message_count: number;
}

/** The three shapes `POST /sessions/:id/compact` (and `/undo`) answer with. */
type CompactResponse =
  | { sessionId: string; dryRun: true; compactedCount: number; newSize: number; batchChars: number }
  | {
      sessionId: string;
      compactedCount: number;
      newSize: number;
      alreadyUpToDate: boolean;
      session: SessionCounts;
    }
  | { sessionId: string; restoredSize: number; session: SessionCounts };

/** Runs the compaction (or its dry run, or the undo) on the server; returns the result as sent. */
export function requestCompaction(
  options: ClientOptions,
  sessionId: string,
  what: CompactRequest,
): Promise<unknown> {
  const path = `/sessions/${encodeURIComponent(sessionId)}/compact${what.undo ? '/undo' : ''}`;
  const body = what.undo
    ? undefined
    : {
        ...(what.dryRun ? { dryRun: true } : {}),
        ...(what.instructions ? { instructions: what.instructions } : {}),
      };
  return request(options, 'POST', path, body);
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;

/** One line saying what the compaction did (or would do), from the server's result. */
export function describeCompaction(result: unknown): string {
  const r = result as CompactResponse;
  if ('restoredSize' in r)
    return `undid the latest compaction of ${r.sessionId}: the summary now covers ${plural(r.restoredSize, 'message')} (${plural(r.session.compaction_count, 'compaction')} left).`;
  if ('dryRun' in r)
    return `dry run: would compact ${plural(r.compactedCount, 'message')} of ${r.sessionId} (${r.batchChars} characters); the summary would then cover ${plural(r.newSize, 'message')}. Nothing was changed.`;
  if (r.alreadyUpToDate)
    return `nothing to compact in ${r.sessionId}: the summary already covers ${plural(r.newSize, 'message')}, and what follows is too short to fold.`;
  return `compacted ${plural(r.compactedCount, 'message')} of ${r.sessionId} into its summary, which now covers ${plural(r.newSize, 'message')} (compaction ${r.session.compaction_count}). Undo with \`cairn compact ${r.sessionId} --undo\`.`;
}
