/**
 * The AI SDK route on two Cairn apps sharing one fresh Postgres database,
 * each the real composition root (its own pool, heartbeat and event feed): a
 * turn started on one is resumed on the other with the `ai` package's own
 * `DefaultChatTransport.reconnectToStream` and `readUIMessageStream`, and
 * stopped from the other; a turn whose instance stopped heartbeating is not
 * resumable (204). The fake model is scripted slow, or stalls mid-stream.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read UI message parts of any tool */
import { DefaultChatTransport, readUIMessageStream, type UIMessage } from 'ai';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { PATIENT_MS, startTestApp, type TestApp } from '../helpers/test-app.js';

let a: TestApp;
let b: CairnApp;
let aUrl: string;
let bUrl: string;
let db: pg.Pool;

beforeAll(async () => {
  a = await startTestApp({ database: 'postgres', mainModel: { timeoutMs: PATIENT_MS } });
  const settings = loadSettings({ home: a.home, env: {} });
  b = await startApp(settings, { logger: false, daemons: false });
  aUrl = await a.app.server.listen({ port: 0, host: '127.0.0.1' });
  bUrl = await b.server.listen({ port: 0, host: '127.0.0.1' });
  db = new pg.Pool({ connectionString: settings.database.url!, max: 2 });
});
afterAll(async () => {
  await db?.end();
  await b?.close();
  await a?.close();
});
beforeEach(() => {
  a.fake!.reset();
});

function transport(base: string) {
  return new DefaultChatTransport<UIMessage>({ api: `${base}/ai-sdk/assistant` });
}

let ids = 0;
function user(text: string): UIMessage {
  return { id: `client-${++ids}`, role: 'user', parts: [{ type: 'text', text }] };
}

async function start(chatId: string, text: string) {
  return transport(aUrl).sendMessages({
    chatId,
    messages: [user(text)],
    trigger: 'submit-message',
    messageId: undefined,
    abortSignal: undefined,
  });
}

/** Reads `stream` into `into` until `until` matches a chunk (or the stream ends); returns the reader. */
async function readUntil(
  stream: ReadableStream<any>,
  into: any[],
  until: (chunk: any) => boolean,
): Promise<ReadableStreamDefaultReader<any>> {
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return reader;
    into.push(value);
    if (until(value)) return reader;
  }
}

/** The rest of `reader`'s chunks into `into`, until the stream ends. */
async function drain(reader: ReadableStreamDefaultReader<any>, into: any[]): Promise<void> {
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    into.push(value);
  }
}

function textOf(message: UIMessage): string {
  return message.parts
    .filter((p): p is { type: 'text'; text: string } => p.type === 'text')
    .map((p) => p.text)
    .join('');
}

async function stopOn(base: string, chatId: string) {
  const res = await fetch(`${base}/ai-sdk/assistant/${chatId}/stop`, { method: 'POST' });
  expect(res.status).toBe(200);
  return res.json();
}

describe('the AI SDK route on two instances', () => {
  it('resumes on instance 2 the turn instance 1 runs: the whole assistant message, then the rest', async () => {
    a.fake!.script(
      { content: 'Let me look.', tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is late.', delayMs: 3_000 },
    );
    const first: any[] = [];
    const reader = await readUntil(
      await start('chat-two', 'What time is it?'),
      first,
      (c) => c.type === 'tool-output-available',
    );
    // The page goes away on instance 1 and comes back on instance 2.
    await reader.cancel();

    const resumed = await transport(bUrl).reconnectToStream({ chatId: 'chat-two' });
    expect(resumed).not.toBeNull();
    const errors: unknown[] = [];
    let message: UIMessage | undefined;
    for await (const m of readUIMessageStream<UIMessage>({
      stream: resumed!,
      onError: (e) => errors.push(e),
    }))
      message = m;
    expect(errors).toEqual([]);
    expect(message!.id).toBe(first[0].messageId);
    expect(textOf(message!)).toBe('Let me look.It is late.');
    expect(message!.parts.find((p) => p.type === 'tool-current_time')).toMatchObject({
      state: 'output-available',
      input: {},
    });
    // Ended: neither instance has a turn to resume.
    expect(await transport(bUrl).reconnectToStream({ chatId: 'chat-two' })).toBeNull();
    expect(await transport(aUrl).reconnectToStream({ chatId: 'chat-two' })).toBeNull();
  });

  it('stops from instance 2 the turn instance 1 runs; both streams end with the abort', async () => {
    // A step with text and a tool call, then a model call that never answers.
    a.fake!.script(
      { content: 'Checking the clock.', tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { hang: true },
    );
    const onA: any[] = [];
    const readerA = await readUntil(
      await start('chat-stop-two', 'Say something'),
      onA,
      (c) => c.type === 'tool-output-available',
    );
    const endA = drain(readerA, onA);

    const resumed = await transport(bUrl).reconnectToStream({ chatId: 'chat-stop-two' });
    expect(resumed).not.toBeNull();
    const onB: any[] = [];
    const readerB = await readUntil(resumed!, onB, (c) => c.type === 'tool-output-available');
    // What instance 1 had sent so far, replayed from the log (text deltas joined in one).
    expect(onB.map((c) => c.type)).toEqual([
      'start',
      'start-step',
      'text-start',
      'text-delta',
      'text-end',
      'tool-input-available',
      'tool-output-available',
    ]);
    expect(onB[3].delta).toBe('Checking the clock.');

    expect(await stopOn(bUrl, 'chat-stop-two')).toEqual({ stopped: true });
    await drain(readerB, onB);
    await endA;
    expect(onA.at(-1)).toMatchObject({ type: 'abort' });
    expect(onB.at(-1)).toMatchObject({ type: 'abort' });
    expect(await transport(bUrl).reconnectToStream({ chatId: 'chat-stop-two' })).toBeNull();
    expect(await stopOn(bUrl, 'chat-stop-two')).toEqual({ stopped: false });
  });

  it('answers 204 for a turn whose instance stopped heartbeating, and will not stop it', async () => {
    a.fake!.script({ hang: true });
    const onA: any[] = [];
    const readerA = await readUntil(
      await start('chat-dead', 'Hello?'),
      onA,
      (c) => c.type === 'start',
    );
    const endA = drain(readerA, onA);
    const { rows } = await db.query<{ session_id: string }>(
      `SELECT s.session_id FROM chat_streams s
       JOIN front_end_chats c ON c.session_id = s.session_id
       WHERE c.chat_id = 'chat-dead' AND s.ended = 0`,
    );
    expect(rows).toHaveLength(1);
    // As if the instance running it had died: its holder is an instance with no heartbeat.
    await db.query(`UPDATE chat_streams SET instance_id = 'inst_gone' WHERE session_id = $1`, [
      rows[0]!.session_id,
    ]);

    const res = await fetch(`${bUrl}/ai-sdk/assistant/chat-dead/stream`);
    expect(res.status).toBe(204);
    expect(await transport(bUrl).reconnectToStream({ chatId: 'chat-dead' })).toBeNull();
    expect(await stopOn(bUrl, 'chat-dead')).toEqual({ stopped: false });

    // Instance 1 still runs it in memory and stops it there.
    expect(await stopOn(aUrl, 'chat-dead')).toEqual({ stopped: true });
    await endA;
    expect(onA.at(-1)).toMatchObject({ type: 'abort' });
  });
});
