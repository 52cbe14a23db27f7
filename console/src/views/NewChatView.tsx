/**
 * A new chat with an agent: only the chat box. The session is made by the
 * first message (POST /agents/:name/chat without a sessionId), so opening a
 * new chat and leaving it makes none; once the first turn is answered, the
 * console moves to that session's page.
 */
import { useRef } from 'preact/hooks';
import { href, navigate } from '../lib/router';
import { ChatBox } from './ChatBox';

export function NewChatView({ agentName }: { agentName: string }) {
  const sessionId = useRef<string>();
  return (
    <section class="main" aria-labelledby="new-chat-title">
      <h2 id="new-chat-title">New chat with {agentName}</h2>
      <p>The session starts with your first message.</p>
      <ChatBox
        agentName={agentName}
        onSession={(id) => (sessionId.current = id)}
        onTurnEnd={(_recalled, ok) => {
          // A refused first message made no session: the error stays on this page.
          if (ok && sessionId.current)
            navigate(href(`sessions/${encodeURIComponent(sessionId.current)}`));
        }}
      />
    </section>
  );
}
