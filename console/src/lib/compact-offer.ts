/**
 * Whether the compaction panel offers "Compact now": only when the server's
 * own dry run says something would be compacted, so the button never leads to
 * "nothing to compact". Otherwise, one sentence saying why not.
 */
import type { DryRun, Message, Session } from './types';

export type CompactOffer = { kind: 'offer' } | { kind: 'nothing'; reason: string };

/**
 * `dryRun` is the answer to `POST /sessions/:id/compact {dryRun: true}`, or
 * undefined when there is none (an older server, a failed request): then the
 * buttons are offered and the server has the last word.
 */
export function compactOffer(
  session: Pick<Session, 'status' | 'compact_size'>,
  messages: readonly Pick<Message, 'role' | 'compacted'>[],
  dryRun: Pick<DryRun, 'compactedCount'> | undefined,
): CompactOffer {
  if (session.status === 'closed')
    return {
      kind: 'nothing',
      reason: 'This session is closed: closed sessions are not compacted.',
    };
  if (dryRun === undefined || dryRun.compactedCount > 0) return { kind: 'offer' };
  const raw = messages.filter((m) => m.role !== 'system' && !m.compacted).length;
  if (raw === 0 && session.compact_size === 0)
    return { kind: 'nothing', reason: 'Nothing to compact: the session has no messages yet.' };
  if (raw === 0)
    return { kind: 'nothing', reason: 'Nothing to compact: every message is in the summary.' };
  return {
    kind: 'nothing',
    reason: `Nothing to compact yet: the ${raw === 1 ? 'message' : `${raw} messages`} after the summary stay raw until the conversation grows (a tool call still waiting stays raw too).`,
  };
}
