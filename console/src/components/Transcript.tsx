/**
 * A session's messages: tool calls folded with their results, the compacted
 * prefix set apart behind "Summary covers N messages", then the raw tail.
 * With `onFork`, each user and assistant message offers "Fork from here".
 */
import type { Api } from '../lib/api';
import type { CallSummary } from '../lib/model-calls';
import { summaryCoversLabel, transcriptModel, type Block } from '../lib/transcript';
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
        <pre class="args" aria-label="Arguments">
          {block.arguments}
        </pre>
        {block.result && (
          <pre class="result" aria-label="Result">
            {block.result.content}
          </pre>
        )}
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
              <p>{summary}</p>
            </section>
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
