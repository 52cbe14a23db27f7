/** How the sessions list names a session and says when it was used. */
import { formatTime } from './format';
import type { Message, Session } from './types';

/** How much of the first user message a row shows. */
export const LABEL_MAX_CHARS = 80;

/**
 * A session's name in a list: its title, else the start of its first user
 * message on one line, else a note that nothing was said yet.
 */
export function sessionLabel(session: Pick<Session, 'title' | 'first_user_message'>): {
  text: string;
  kind: 'title' | 'first-message' | 'empty';
} {
  const title = session.title?.trim();
  if (title) return { text: title, kind: 'title' };
  const first = session.first_user_message?.replace(/\s+/g, ' ').trim();
  if (first) {
    const cut =
      first.length > LABEL_MAX_CHARS ? `${first.slice(0, LABEL_MAX_CHARS - 1).trimEnd()}…` : first;
    return { text: cut, kind: 'first-message' };
  }
  return { text: 'No messages yet', kind: 'empty' };
}

/**
 * A session page's heading: its title, else the start of its first user
 * message (compacted or not), else the agent and when it started; never the
 * raw id, which the page shows beside it.
 */
export function sessionHeading(
  session: Pick<Session, 'title' | 'agent_name' | 'created_at'>,
  messages: readonly Pick<Message, 'role' | 'content'>[],
): string {
  const first = messages.find((m) => m.role === 'user' && m.content?.trim())?.content ?? null;
  const label = sessionLabel({ title: session.title, first_user_message: first });
  if (label.kind !== 'empty') return label.text;
  return `Session with ${session.agent_name}, started ${formatTime(session.created_at)}`;
}
