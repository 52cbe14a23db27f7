/**
 * Under an assistant message: the model call that produced it — tokens, cost
 * and latency at a glance, and, when opened, the request exactly as the model
 * received it, with the summary, recalled messages and memory notes marked.
 */
import { useState } from 'preact/hooks';
import type { Api } from '../lib/api';
import {
  callLine,
  sentKind,
  sentText,
  type CallRecord,
  type CallSummary,
  type SentKind,
} from '../lib/model-calls';

const LABELS: Record<SentKind, string> = {
  system: 'system prompt',
  memory: 'memory notes',
  summary: 'summary',
  recall: 'recalled messages',
  conversation: '',
};

export function SentRequest({ record }: { record: CallRecord }) {
  const messages = record.request.messages ?? [];
  return (
    <div class="sent-request">
      <p class="sent-meta">
        {record.wire ? 'As sent to' : "Cairn's request to"}{' '}
        <code>{String(record.request.model)}</code>: {messages.length} messages
        {record.request.tools ? `, ${record.request.tools.length} tools` : ''}
      </p>
      <ol class="sent-messages">
        {messages.map((message, index) => {
          const kind = sentKind(message);
          return (
            <li key={index} class={`sent sent-${kind}`}>
              <span class="role">{message.role}</span>
              {LABELS[kind] && <span class={`mark mark-${kind}`}>{LABELS[kind]}</span>}
              <pre class="text">{sentText(message)}</pre>
            </li>
          );
        })}
      </ol>
      <details>
        <summary>Raw JSON</summary>
        <pre class="raw">{JSON.stringify(record.request, null, 2)}</pre>
      </details>
    </div>
  );
}

export function WhatTheModelSaw({ call, api }: { call: CallSummary; api: Api }) {
  const [record, setRecord] = useState<CallRecord>();
  const [error, setError] = useState<string>();
  const load = (open: boolean) => {
    if (!open || record) return;
    api.get<{ call: CallRecord }>(`/calls/${call.id}`).then(
      (res) => setRecord(res.call),
      (err: unknown) => setError((err as Error).message),
    );
  };
  return (
    <details class="model-saw" onToggle={(e) => load(e.currentTarget.open)}>
      <summary>
        What the model saw <span class="call-line">{callLine(call)}</span>
      </summary>
      {error && <p class="error">{error}</p>}
      {!record && !error && <p>Loading…</p>}
      {record && <SentRequest record={record} />}
    </details>
  );
}
