/**
 * The chat box: sends a message as a streamed chat turn and shows the reply
 * as it arrives, with each tool call as it runs and its result when it lands.
 */
import { useState } from 'preact/hooks';
import { useApi } from '../lib/hooks';
import type { SseEvent } from '../lib/sse';

interface RunningTool {
  id: string;
  name: string;
  arguments: string;
  result?: string;
  isError?: boolean;
}

export function ChatBox(props: {
  agentName: string;
  /** Absent in a new chat: the first message makes the session (see `onSession`). */
  sessionId?: string;
  disabled?: boolean;
  /** The session the turn runs on, as the server announces it. */
  onSession?: (sessionId: string) => void;
  /** `recalled`: the reply's seq and the compacted messages recalled for it, when there were any. */
  onTurnEnd: (recalled?: { replySeq: number; seqs: number[] }, ok?: boolean) => void;
}) {
  const api = useApi();
  const [message, setMessage] = useState('');
  const [busy, setBusy] = useState(false);
  const [reply, setReply] = useState('');
  const [tools, setTools] = useState<RunningTool[]>([]);
  const [error, setError] = useState<string>();
  let recalled: { replySeq: number; seqs: number[] } | undefined;
  let ok = false;

  const onEvent = (event: SseEvent) => {
    switch (event.event) {
      case 'session': {
        const data = JSON.parse(event.data) as { sessionId: string };
        props.onSession?.(data.sessionId);
        break;
      }
      case 'delta': {
        const data = JSON.parse(event.data) as { text: string };
        setReply((text) => text + data.text);
        break;
      }
      case 'tool_call': {
        const data = JSON.parse(event.data) as { id: string; name: string; arguments: string };
        setTools((list) => [...list, { id: data.id, name: data.name, arguments: data.arguments }]);
        break;
      }
      case 'tool_result': {
        const data = JSON.parse(event.data) as { id: string; content: string; isError: boolean };
        setTools((list) =>
          list.map((t) =>
            t.id === data.id ? { ...t, result: data.content, isError: data.isError } : t,
          ),
        );
        break;
      }
      case 'done': {
        const data = JSON.parse(event.data) as {
          messages?: { seq: number; role: string }[];
          recall?: { seqs: number[] } | null;
        };
        const reply = data.messages?.filter((m) => m.role === 'assistant').at(-1);
        if (reply && data.recall && data.recall.seqs.length > 0)
          recalled = { replySeq: reply.seq, seqs: data.recall.seqs };
        ok = true;
        break;
      }
      case 'error': {
        const data = JSON.parse(event.data) as { error?: { message?: string } };
        setError(data.error?.message ?? 'The turn failed.');
        break;
      }
    }
  };

  const send = async () => {
    const text = message.trim();
    if (text === '' || busy) return;
    setBusy(true);
    setReply('');
    setTools([]);
    setError(undefined);
    try {
      await api.stream(
        `/agents/${encodeURIComponent(props.agentName)}/chat`,
        {
          message: text,
          ...(props.sessionId !== undefined ? { sessionId: props.sessionId } : {}),
          stream: true,
        },
        onEvent,
      );
      setMessage('');
    } catch (err) {
      setError((err as Error).message);
    } finally {
      // The turn is in the transcript now; the live panel was for while it ran.
      setBusy(false);
      setReply('');
      setTools([]);
      props.onTurnEnd(recalled, ok);
    }
  };

  return (
    <section class="chat" aria-label="Chat">
      {(busy || reply !== '' || tools.length > 0) && (
        <div class="streaming" aria-live="polite" aria-busy={busy}>
          {tools.length > 0 && (
            <ul class="running-tools" aria-label="Tool calls">
              {tools.map((t) => (
                <li key={t.id}>
                  <code>{t.name}</code>{' '}
                  {t.result === undefined ? 'running…' : t.isError ? 'failed' : 'done'}
                </li>
              ))}
            </ul>
          )}
          {busy && <p class="reply-live">{reply || 'Thinking…'}</p>}
        </div>
      )}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void send();
        }}
      >
        <label for="chat-message" class="visually-hidden">
          Message
        </label>
        <textarea
          id="chat-message"
          value={message}
          rows={2}
          placeholder="Message (Enter sends, Shift+Enter for a new line)"
          disabled={props.disabled}
          onInput={(e) => setMessage(e.currentTarget.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
              e.preventDefault();
              void send();
            }
          }}
        />
        <button type="submit" disabled={busy || props.disabled}>
          Send
        </button>
      </form>
      {error && (
        <p role="alert" class="error">
          {error}
        </p>
      )}
    </section>
  );
}
