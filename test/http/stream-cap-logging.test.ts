/**
 * How refusals and disconnects show up in the log, on a real port with the
 * server's own pino logger: a burst of over-cap streams gets 503 with
 * `Retry-After` and one warn line (a new burst, after a stream closed, gets
 * another), never an error line per refusal; a client that disconnects in
 * the middle of a turn is an info line, not an `internal` error.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { STREAM_RETRY_AFTER_S } from '../../src/http/stream-gate.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const SLOW_MS = 2_000;
const BURST = 12;

interface LogLine {
  level: number;
  msg: string;
  code?: string;
  err?: { code?: string };
}
const WARN = 40;
const ERROR = 50;

/** A real app on a port whose log lines are collected in `lines`. */
async function loggedApp(server: Record<string, unknown>) {
  const lines: LogLine[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        lines.push(JSON.parse(line) as LogLine);
      done();
    },
  });
  const t = await startTestApp({ server, app: { logger: { level: 'info', stream } } });
  await t.app.server.listen({ host: '127.0.0.1', port: 0 });
  const port = (t.app.server.server.address() as { port: number }).port;
  t.fake!.setDefault(() => ({ content: 'late', delayMs: SLOW_MS }));
  return { t, port, lines };
}

describe('over-cap streams in the log', () => {
  let t: TestApp;
  let port: number;
  let lines: LogLine[];

  beforeAll(async () => {
    ({ t, port, lines } = await loggedApp({ maxStreams: 1 }));
  });
  afterAll(async () => t.close());

  /** Opens GET /events and resolves once its headers arrived (the stream holds the slot). */
  function openEvents(): Promise<IncomingMessage> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port, path: '/events' }, resolve);
      req.on('error', reject);
      req.end();
    });
  }
  const capLines = () => lines.filter((l) => l.msg.startsWith('stream cap reached'));
  const errors = () => lines.filter((l) => l.level >= ERROR);

  it('answers each over-cap stream 503 with Retry-After, and logs the burst once at warn', async () => {
    const held = await openEvents();
    expect(held.statusCode).toBe(200);
    for (let i = 0; i < BURST; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/events`);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe(String(STREAM_RETRY_AFTER_S));
      await res.text();
    }
    expect(capLines()).toHaveLength(1);
    expect(capLines()[0]!.level).toBe(WARN);
    expect(errors()).toEqual([]);

    // The stream closes: the next time the cap is hit is a new burst, logged once more.
    held.destroy();
    await expect
      .poll(async () => {
        const res = await openEventsOrStatus();
        return res;
      })
      .toBe(200);
    for (let i = 0; i < 3; i++)
      expect((await fetch(`http://127.0.0.1:${port}/events`)).status).toBe(503);
    expect(capLines()).toHaveLength(2);
    expect(errors()).toEqual([]);
    reopened?.destroy();
  });

  let reopened: IncomingMessage | undefined;
  /** Tries to take the one slot; keeps the stream open when it got it. */
  async function openEventsOrStatus(): Promise<number> {
    const res = await openEvents();
    if (res.statusCode === 200) reopened = res;
    else res.resume();
    return res.statusCode ?? 0;
  }
});

describe('client disconnects in the log', () => {
  let t: TestApp;
  let port: number;
  let lines: LogLine[];

  beforeAll(async () => {
    ({ t, port, lines } = await loggedApp({}));
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'late', delayMs: SLOW_MS }));
  });

  it.each([
    ['a native chat', '/agents/assistant/chat', { message: 'take your time' }],
    [
      'a streamed /v1 chat completion',
      '/v1/chat/completions',
      { model: 'assistant', stream: true, messages: [{ role: 'user', content: 'take your time' }] },
    ],
    ['a /v1 response', '/v1/responses', { model: 'assistant', input: 'take your time' }],
  ])(
    'a client that disconnects from %s is logged at info, not as an internal error',
    async (_name, path, body) => {
      const before = lines.length;
      const controller = new AbortController();
      const pending = fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: controller.signal,
      }).catch(() => undefined);
      // Disconnect while the model is still thinking.
      await expect.poll(() => t.fake!.requests.length).toBeGreaterThan(0);
      controller.abort();
      await pending;
      await expect
        .poll(
          () => lines.slice(before).filter((l) => l.msg.includes('the client disconnected')).length,
          {
            timeout: 10_000,
          },
        )
        .toBe(1);
      await t.app.sessionLock.drain();
      const fresh = lines.slice(before);
      expect(fresh.filter((l) => l.level >= ERROR)).toEqual([]);
      expect(JSON.stringify(fresh)).not.toContain('INTERNAL');
    },
  );
});
