/**
 * Event streams under clients that never read, over real
 * sockets on 127.0.0.1: each stream's queue is bounded and a client that
 * stops reading is dropped; readers and /health are unaffected; the number of
 * open streams is capped (503 SERVICE_UNAVAILABLE beyond, before a chat turn
 * starts).
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventRow } from '../../src/store/store.js';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const MAX_STREAMS = 3;
const STREAM_BUFFER_BYTES = 64 * 1024;
/** Far more than the kernel's socket buffers on loopback can absorb for a client that never reads. */
const EVENTS = 120;
const EVENT_DATA_CHARS = 256 * 1024;

async function until(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 1_000; i++) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('event streams with clients that do not read', () => {
  let t: TestApp;
  let port: number;
  const sockets: Socket[] = [];
  const responses: IncomingMessage[] = [];

  beforeAll(async () => {
    t = await startTestApp({
      server: { maxStreams: MAX_STREAMS, streamBufferBytes: STREAM_BUFFER_BYTES },
    });
    await t.app.server.listen({ port: 0, host: '127.0.0.1' });
    port = (t.app.server.server.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    for (const res of responses) res.destroy();
    await t.close();
  });

  /** A raw client that reads the response headers, then never reads again. */
  async function nonReader(): Promise<Socket> {
    const socket = connect({ port, host: '127.0.0.1' });
    sockets.push(socket);
    socket.write(`GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n`);
    await new Promise<void>((resolve) =>
      socket.once('data', () => {
        socket.pause();
        resolve();
      }),
    );
    return socket;
  }

  /** A client that reads everything; counts the `event: big` events it received. */
  async function reader(): Promise<{ res: IncomingMessage; received: () => number }> {
    let text = '';
    let count = 0;
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest({ port, host: '127.0.0.1', path: '/events' }, resolve);
      req.on('error', reject);
      req.end();
    });
    responses.push(res);
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      text += chunk;
      // Count whole events and keep only the unfinished tail.
      const parts = text.split('\n\n');
      text = parts.pop() ?? '';
      count += parts.filter((p) => p.includes('event: big')).length;
    });
    return { res, received: () => count };
  }

  function get(path: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ port, host: '127.0.0.1', path }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end();
    });
  }

  /** POST /agents/assistant/chat with `payload`; resolves with the whole response. */
  function postChat(payload: object): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(
        {
          port,
          host: '127.0.0.1',
          path: '/agents/assistant/chat',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(payload));
    });
  }

  it('a streamed chat whose client stops reading is dropped, and the session stays usable', async () => {
    t.fake!.reset();
    // A long streamed reply: far more than the stream's buffer.
    t.fake!.script({ content: 'y'.repeat(8 * 1024 * 1024) });
    const socket = connect({ port, host: '127.0.0.1' });
    sockets.push(socket);
    const payload = JSON.stringify({ message: 'talk a lot', stream: true });
    socket.write(
      `POST /agents/assistant/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`,
    );
    await new Promise<void>((resolve) =>
      socket.once('data', () => {
        socket.pause();
        resolve();
      }),
    );
    const sessionId = await (async () => {
      let id: string | undefined;
      await until(async () => {
        const list = JSON.parse((await get('/sessions?agentName=assistant')).body) as {
          sessions: { id: string }[];
        };
        id = list.sessions[0]?.id;
        return id !== undefined;
      }, 'the chat session');
      return id!;
    })();
    // The session is free again for the next turn.
    // The next turn's context holds the 8 MB reply, far over the window: the
    // turn first compacts it away (agents compact by default), so the
    // summariser answers too; every chat request gets 'short'.
    t.fake!.setDefault((body: { messages?: { role: string; content: unknown }[] }) =>
      isSummaryRequest(body) ? { content: 'Summary of a long reply.' } : { content: 'short' },
    );
    await until(async () => {
      const res = await postChat({ message: 'again', sessionId });
      return res.status === 200 && (JSON.parse(res.body) as { reply: string }).reply === 'short';
    }, 'a chat on the session after the drop');
    // The dropped stream gave its slot back (a client that does not read would
    // otherwise hold it until it read everything): every slot is free again.
    await until(async () => {
      const probes = [];
      for (let n = 0; n < MAX_STREAMS; n++) probes.push(await reader());
      const ok = probes.every((p) => p.res.statusCode === 200);
      for (const p of probes) p.res.destroy();
      return ok;
    }, 'every stream slot to be free');
    expect((await get('/health')).status).toBe(200);
    socket.destroy();
  });

  it('caps open streams, drops the client that stops reading, and serves the rest', async () => {
    t.fake!.reset();
    await nonReader();
    const good = await reader();
    const third = await reader();

    // At the cap: /events and a streamed chat are refused with 503, the chat before its turn.
    const refused = await get('/events');
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.body).error.code).toBe('SERVICE_UNAVAILABLE');
    expect(JSON.parse(refused.body).error.message).toContain('server.maxStreams');
    const chat = await postChat({ message: 'hi', stream: true });
    expect(chat.status).toBe(503);
    // A streamed /v1 chat completion counts against the same cap, refused in OpenAI's shape.
    const v1 = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'assistant',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    expect(v1.status).toBe(503);
    const v1Error = ((await v1.json()) as { error: { type: string; message: string } }).error;
    expect(v1Error.type).toBe('server_error');
    expect(v1Error.message).toContain('server.maxStreams');
    expect(t.fake!.requests).toHaveLength(0);
    expect((await get('/health')).status).toBe(200);

    third.res.destroy();
    // Big live events: the non-reader's queue overflows; the reader keeps up.
    const big = 'x'.repeat(EVENT_DATA_CHARS);
    for (let i = 1; i <= EVENTS; i++) {
      const row: EventRow = {
        id: 1_000_000 + i,
        type: 'big',
        session_id: null,
        data: { i, big },
        created_at: new Date().toISOString(),
      };
      t.app.events.publish([row]);
      // Let the sockets move between events, as a live server would.
      await new Promise((resolve) => setImmediate(resolve));
    }
    await until(() => good.received() === EVENTS, 'the reading client to get every event');
    expect((await get('/health')).status).toBe(200);

    // The non-reader was dropped, so its slot is free again: two new streams fit
    // beside the reader (the third slot was freed by the closed reader).
    await until(async () => {
      const probe = await reader();
      const ok = probe.res.statusCode === 200;
      probe.res.destroy();
      return ok;
    }, 'a free stream slot');
    const a = await reader();
    const b = await reader();
    expect([a.res.statusCode, b.res.statusCode]).toEqual([200, 200]);
    a.res.destroy();
    b.res.destroy();
  });
});
