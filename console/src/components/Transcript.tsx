/**
 * A session's messages: tool calls folded with their labelled arguments and
 * results, the compacted prefix set apart behind "Summary covers N messages",
 * the summary as Markdown, then the raw tail (with a note when it starts in the middle of an exchange).
 * With `onFork`, each user and assistant message offers "Fork from here".
 */
import type { Api } from '../lib/api';
import { markdownToSafeHtml } from '../lib/markdown';
import type { CallSummary } from '../lib/model-calls';
import {
  readableToolText,
  summaryCoversLabel,
  tailStartNote,
  transcriptModel,
  type Block,
} from '../lib/transcript';
import type { Message } from '../lib/types';
import { WhatTheModelSaw } from './WhatTheModelSaw';

type OnFork = (seq: number) => void;

/** "Recalled #4, #12": the compacted messages automatic recall gave the model for a reply. */
export function recalledLabel(seqs: readonly number[]): string {
  return `Recalled ${seqs.map((seq) => `#${seq}`).join(', ')}`;
}

/** The model call behind each assistant message (by seq), and the API to open its request. */
export interface CallsView {
  bySeq: ReadonlyMap<number, CallSummary>;
  api: Api;
}

/** One labelled half of a tool call: its arguments or its result. */
function ToolPart({ label, kind, children }: { label: string; kind: string; children: string }) {
  return (
    <div class={`tool-part tool-${kind}`}>
      <h4 class="tool-label">{label}</h4>
      <pre class={kind} aria-label={label}>
        {children}
      </pre>
    </div>
  );
}

function BlockView({
  block,
  onFork,
  recalled,
  calls,
}: {
  block: Block;
  onFork: OnFork | undefined;
  recalled?: readonly number[];
  calls?: CallsView | undefined;
}) {
  const call = calls?.bySeq.get(block.seq);
  const saw = call && calls ? <WhatTheModelSaw call={call} api={calls.api} /> : null;
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
        {recalled && recalled.length > 0 && (
          <p
            class="recalled"
            title="Earlier messages put back into the model's request for this reply"
          >
            {recalledLabel(recalled)}
          </p>
        )}
        {saw}
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
        <ToolPart label="Arguments" kind="args">
          {block.arguments.trim() === ''
            ? 'The call is not in this part of the transcript.'
            : block.arguments.trim() === '{}'
              ? '{} (none)'
              : readableToolText(block.arguments)}
        </ToolPart>
        <ToolPart label="Result" kind="result">
          {block.result
            ? block.result.content === ''
              ? '(empty)'
              : readableToolText(block.result.content)
            : 'None yet: the tool is running, or its result was never stored.'}
        </ToolPart>
      </details>
      {saw}
    </li>
  );
}

function Blocks({
  blocks,
  onFork,
  recalled,
  calls,
}: {
  blocks: Block[];
  onFork?: OnFork | undefined;
  recalled?: ReadonlyMap<number, readonly number[]>;
  calls?: CallsView | undefined;
}) {
  // A reply with several tool calls shows its model call once, under the first.
  const shown = new Set<number>();
  return (
    <ol class="messages">
      {blocks.map((b) => {
        const first = !shown.has(b.seq);
        shown.add(b.seq);
        return (
          <BlockView
            key={`${b.seq}-${b.kind === 'tool' ? b.callId : 't'}`}
            block={b}
            onFork={onFork}
            {...(recalled?.has(b.seq) ? { recalled: recalled.get(b.seq)! } : {})}
            calls={first ? calls : undefined}
          />
        );
      })}
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
  /** Per reply (its seq): the compacted messages automatic recall gave the model for it. */
  recalled?: ReadonlyMap<number, readonly number[]>;
  /** When given: "what the model saw" under each assistant message. */
  calls?: CallsView;
}

export function Transcript({
  messages,
  compactSize,
  summary,
  onFork,
  recalled,
  calls,
}: TranscriptProps) {
  const model = transcriptModel(messages);
  const note = tailStartNote(messages, compactSize);
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
            <Blocks blocks={model.compacted} onFork={onFork} calls={calls} />
          </details>
          {summary !== null && (
            <section class="summary" aria-label="Summary">
              <h3>Summary</h3>
              {/* Safe HTML: raw HTML escaped, no images, no dangerous links (lib/markdown). */}
              <div
                class="markdown"
                dangerouslySetInnerHTML={{ __html: markdownToSafeHtml(summary, 4) }}
              />
            </section>
          )}
          {note && (
            <p class="tail-note" role="note">
              {note}
            </p>
          )}
        </div>
      )}
      <Blocks
        blocks={model.live}
        onFork={onFork}
        {...(recalled ? { recalled } : {})}
        calls={calls}
      />
    </section>
  );
}
