/**
 * Bodies over a real socket on 127.0.0.1: a body over the limit is read and
 * thrown away before its 413, so the client reads the answer and the
 * connection ends cleanly instead of being reset; a body that drips in is
 * cut at `server.requestTimeoutMs` (shortened here: the default is 60 s).
 */
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let harness: TestApp | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function listen(server: Record<string, unknown>): Promise<number> {
  harness = await startTestApp({ fake: null, server });
  await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
  const address = harness.app.server.server.address();
  if (address === null || typeof address === 'string') throw new Error('no address');
  return address.port;
}

interface Exchange {
  /** Everything the server sent. */
  text: string;
  /** A socket error (ECONNRESET, EPIPE), if any. */
  error: string | undefined;
}

/**
 * Sends `head`, then the body's chunks `gapMs` apart, reading all the while;
 * ends its side once the server's answer is complete and waits for the close.
 */
function exchange(port: number, head: string, chunks: string[], gapMs: number): Promise<Exchange> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    let error: string | undefined;
    socket.setEncoding('utf8');
    socket.on('data', (data: string) => {
      text += data;
      text = text.replace(/^HTTP\/1\.1 100 Continue\r\n\r\n/, '');
      const [headers, body = ''] = text.split('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(headers ?? '');
      if (length && body.length >= Number(length[1])) socket.end();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      error = err.code ?? err.message;
    });
    socket.on('close', () => resolve({ text, error }));
    socket.write(head);
    let next = 0;
    const send = (): void => {
      if (next >= chunks.length || socket.destroyed || socket.writableEnded) return;
      socket.write(chunks[next++]!);
      setTimeout(send, gapMs);
    };
    send();
  });
}

describe('request bodies', () => {
  it('a body over the limit gets its 413, read by the client, with no reset', async () => {
    const port = await listen({ bodyLimitBytes: 1024 });
    const size = 4 * 1024 * 1024;
    const body = JSON.stringify({ message: 'x'.repeat(size) });
    // Sent as curl sends a large upload (asking to continue first), in pieces:
    // a server that answers and closes at once gets the rest of the body on
    // a closed socket, and resets the connection.
    const pieces = body.match(/[\s\S]{1,65536}/g)!;
    const result = await exchange(
      port,
      `POST /agents/assistant/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`,
      pieces,
      1,
    );
    expect(result.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(result.text).toContain('PAYLOAD_TOO_LARGE');
    expect(result.error).toBeUndefined();
  });

  it('a body that drips in is cut at server.requestTimeoutMs with 408', async () => {
    const port = await listen({ requestTimeoutMs: 1_000 });
    const started = Date.now();
    const result = await exchange(
      port,
      'POST /agents/assistant/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n',
      Array.from({ length: 400 }, () => ' '),
      100,
    );
    const elapsed = Date.now() - started;
    expect(result.text).toMatch(/^HTTP\/1\.1 408 /);
    // Cut near the limit: not before it, and well before the body could have arrived (40 s).
    expect(elapsed).toBeGreaterThanOrEqual(900);
    expect(elapsed).toBeLessThan(15_000);
  });
});
