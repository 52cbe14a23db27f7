/**
 * Migration 004: the visible-transcript hash chain (store/transcript-hash.ts).
 * `messages.transcript_hash` is the chain hash after each visible message;
 * `sessions.transcript_hash` is the session's current head, indexed per agent
 * so an OpenAI client's resent history finds its session in one lookup.
 * Frozen once landed; the same SQL in both dialects.
 */
export const version = 4;
export const name = 'transcript-hash';
export const up = (): string => `
ALTER TABLE messages ADD COLUMN transcript_hash TEXT;
ALTER TABLE sessions ADD COLUMN transcript_hash TEXT;
CREATE INDEX sessions_transcript ON sessions (agent_name, transcript_hash, updated_at)
  WHERE transcript_hash IS NOT NULL;
`;
