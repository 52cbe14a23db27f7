/**
 * A session's messages: tool calls folded with their results, the compacted
 * prefix set apart behind "Summary covers N messages", then the raw tail.
 */
import type { Api } from '../lib/api';
import type { CallSummary } from '../lib/model-calls';
import { summaryCoversLabel, transcriptModel, type Block } from '../lib/transcript';
import type { Message } from '../lib/types';
import { WhatTheModelSaw } from './WhatTheModelSaw';

/** The model call behind each assistant message (by seq), and the API to open its request. */
export interface CallsView {
  bySeq: ReadonlyMap<number, CallSummary>;
  api: Api;
}

function BlockView({ block, calls }: { block: Block; calls?: CallsView | undefined }) {
  const call = calls?.bySeq.get(block.seq);
  const saw = call && calls ? <WhatTheModelSaw call={call} api={calls.api} /> : null;
  if (block.kind === 'text') {
    return (
      <li class={`msg msg-${block.role}`} data-seq={block.seq}>
        <span class="role">{block.role}</span>
        <div class="text">{block.text}</div>
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

function Blocks({ blocks, calls }: { blocks: Block[]; calls?: CallsView | undefined }) {
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
  /** When given: "what the model saw" under each assistant message. */
  calls?: CallsView;
}

export function Transcript({ messages, compactSize, summary, calls }: TranscriptProps) {
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
            <Blocks blocks={model.compacted} calls={calls} />
          </details>
          {summary !== null && (
            <section class="summary" aria-label="Summary">
              <h3>Summary</h3>
              <p>{summary}</p>
            </section>
          )}
        </div>
      )}
      <Blocks blocks={model.live} calls={calls} />
    </section>
  );
}
