/**
 * A session's messages: tool calls folded with their results, the compacted
 * prefix set apart behind "Summary covers N messages", then the raw tail.
 * With `onFork`, each user and assistant message offers "Fork from here".
 */
import { summaryCoversLabel, transcriptModel, type Block } from '../lib/transcript';
import type { Message } from '../lib/types';

type OnFork = (seq: number) => void;

function BlockView({ block, onFork }: { block: Block; onFork: OnFork | undefined }) {
  if (block.kind === 'text') {
    return (
      <li class={`msg msg-${block.role}`} data-seq={block.seq}>
        <span class="role">{block.role}</span>
        <div class="text">{block.text}</div>
        {onFork && block.role !== 'system' && (
          <button
            type="button"
            class="fork"
            title="A new session holding the conversation up to this message"
            onClick={() => onFork(block.seq)}
          >
            Fork from here
          </button>
        )}
      </li>
    );
  }
  return (
    <li class="msg msg-tool" data-seq={block.seq}>
      <details>
        <summary>
          Tool call: <code>{block.name}</code>
          {block.result ? '' : ' (no result yet)'}
        </summary>
        <pre class="args" aria-label="Arguments">
          {block.arguments}
        </pre>
        {block.result && (
          <pre class="result" aria-label="Result">
            {block.result.content}
          </pre>
        )}
      </details>
    </li>
  );
}

function Blocks({ blocks, onFork }: { blocks: Block[]; onFork?: OnFork | undefined }) {
  return (
    <ol class="messages">
      {blocks.map((b) => (
        <BlockView
          key={`${b.seq}-${b.kind === 'tool' ? b.callId : 't'}`}
          block={b}
          onFork={onFork}
        />
      ))}
    </ol>
  );
}

export interface TranscriptProps {
  messages: readonly Message[];
  /** `compact_size`: how many non-system messages the summary covers. */
  compactSize: number;
  summary: string | null;
  /** Forks the session at this message's seq (the console opens the fork). */
  onFork?: OnFork;
}

export function Transcript({ messages, compactSize, summary, onFork }: TranscriptProps) {
  const model = transcriptModel(messages);
  return (
    <section class="transcript" aria-label="Transcript">
      {model.system.length > 0 && (
        <details class="system">
          <summary>System prompt</summary>
          <Blocks blocks={model.system} />
        </details>
      )}
      {compactSize > 0 && (
        <div class="compacted">
          <details>
            <summary class="divider">{summaryCoversLabel(compactSize)}</summary>
            <Blocks blocks={model.compacted} onFork={onFork} />
          </details>
          {summary !== null && (
            <section class="summary" aria-label="Summary">
              <h3>Summary</h3>
              <p>{summary}</p>
            </section>
          )}
        </div>
      )}
      <Blocks blocks={model.live} onFork={onFork} />
    </section>
  );
}
