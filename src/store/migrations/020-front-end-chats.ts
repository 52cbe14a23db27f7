/**
 * Migration 020: front-end chats. A chat front-end (the AI SDK's `useChat`,
 * an AG-UI client) names its conversation with an id of its own; this table
 * maps (protocol, key, end user, agent, chat id) to the session that holds
 * it. The admin and "no end user" are stored as '' because a primary key
 * column cannot be NULL in Postgres and NULLs never collide in SQLite. A
 * regenerate or an edit forks the session and moves the chat to the fork;
 * a mapping goes with the session it points at. Frozen once landed.
 */
import type { SchemaDialect } from './dialect.js';

export const version = 20;
export const name = 'front-end-chats';
export const up = (d: SchemaDialect): string => `
CREATE TABLE front_end_chats (
  protocol   ${d.orderedText} NOT NULL CHECK (protocol IN ('ai-sdk', 'ag-ui')),
  key_id     ${d.orderedText} NOT NULL,
  end_user   ${d.orderedText} NOT NULL,
  agent_name ${d.orderedText} NOT NULL,
  chat_id    ${d.orderedText} NOT NULL,
  session_id ${d.orderedText} NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  created_at ${d.orderedText} NOT NULL,
  updated_at ${d.orderedText} NOT NULL,
  PRIMARY KEY (protocol, key_id, end_user, agent_name, chat_id)
);
CREATE INDEX front_end_chats_by_session ON front_end_chats (session_id);
`;
