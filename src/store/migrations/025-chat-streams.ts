/**
 * Migration 025: the AI SDK chats' running turns, readable from any instance.
 * `chat_streams` holds one row per session: its latest turn (`stream_id`),
 * the instance running it, whether it ended, and whether someone asked it to
 * stop (the running instance reads that flag, so a stop posted to another
 * instance reaches it). `chat_stream_chunks` holds that turn's UI message
 * chunks in batches, in order, so a resume on another instance replays the
 * whole assistant message and then follows it. Only a session's latest turn
 * is kept: starting the next one deletes the previous one's batches, and
 * both go with their session. A turn whose instance stopped heartbeating
 * (the `instances` table) is not running. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 25;
export const name = 'chat-streams';
export const up = (d: SchemaDialect): string => `
CREATE TABLE chat_streams (
  session_id     ${d.orderedText} PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
  stream_id      ${d.orderedText} NOT NULL,
  instance_id    TEXT NOT NULL,
  ended          INTEGER NOT NULL DEFAULT 0,
  stop_requested INTEGER NOT NULL DEFAULT 0,
  started_at     ${d.orderedText} NOT NULL
);
CREATE TABLE chat_stream_chunks (
  session_id ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  stream_id  ${d.orderedText} NOT NULL,
  seq        INTEGER NOT NULL,
  chunks     TEXT NOT NULL,
  PRIMARY KEY (session_id, stream_id, seq)
);
`;
