/**
 * The console's fetch-based event reader (console/src/lib/sse.ts): SSE framing
 * across arbitrary chunk boundaries, and reconnecting with `Last-Event-ID`
 * against a real HTTP server that drops the stream.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { followEvents, SseParser, type SseEvent } from '../../console/src/lib/sse.js';

describe('SseParser', () => {
  it('parses events split anywhere, with CRLF, comments and multi-line data', () => {
    const text =
      ': keepalive\r\n\r\nid: 7\r\nevent: message.created\r\ndata: {"a":1}\r\n\r\n' +
      'event: delta\ndata: line one\ndata: line two\n\n';
    const expected: SseEvent[] = [
      { id: '7', event: 'message.created', data: '{"a":1}' },
      { id: undefined, event: 'delta', data: 'line one\nline two' },
    ];
    for (let size = 1; size <= text.length; size++) {
      const parser = new SseParser();
      const events: SseEvent[] = [];
      for (let i = 0; i < text.length; i += size)
        events.push(...parser.feed(text.slice(i, i + size)));
      expect(events, `chunks of ${size}`).toEqual(expected);
    }
  });

  it('keeps an unfinished event until its blank line arrives', () => {
    const parser = new SseParser();
    expect(parser.feed('id: 1\nevent: x\ndata: {}')).toEqual([]);
    expect(parser.feed('\n\n')).toEqual([{ id: '1', event: 'x', data: '{}' }]);
  });
});

describe('followEvents', () => {
  let server: Server | undefined;
  afterEach(async () => {
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  it('sends the key, and resumes after a dropped stream with Last-Event-ID', async () => {
    const seen: IncomingHttpHeaders[] = [];
    server = createServer((request, response) => {
      seen.push(request.headers);
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      if (seen.length === 1) {
        // The first stream delivers two events, then the server drops it.
        response.end('id: 1\nevent: a\ndata: {}\n\nid: 2\nevent: b\ndata: {}\n\n');
      } else {
        response.write('id: 3\nevent: c\ndata: {}\n\n');
      }
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;

    const events: string[] = [];
    const states: string[] = [];
    let done: () => void = () => {};
    const third = new Promise<void>((resolve) => (done = resolve));
    const stop = followEvents({
      url: `http://127.0.0.1:${port}/events`,
      headers: () => ({ authorization: 'Bearer k1' }),
      lastEventId: undefined,
      onState: (state) => states.push(state),
      onEvent: (event) => {
        events.push(`${event.id}:${event.event}`);
        if (event.id === '3') done();
      },
    });
    await third;
    stop();

    expect(events).toEqual(['1:a', '2:b', '3:c']);
    expect(seen[0]!.authorization).toBe('Bearer k1');
    expect(seen[0]!['last-event-id']).toBeUndefined();
    expect(seen[1]!['last-event-id']).toBe('2');
    expect(seen[1]!.authorization).toBe('Bearer k1');
    expect(states).toEqual(['live', 'reconnecting', 'live']);
  });

  it('stops on 401 and reports it', async () => {
    let requests = 0;
    server = createServer((_request, response) => {
      requests++;
      response.writeHead(401, { 'content-type': 'application/json' });
      response.end('{"error":{"code":"UNAUTHORIZED","message":"no"}}');
    });
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const unauthorized = new Promise<void>((resolve) => {
      followEvents({
        url: `http://127.0.0.1:${port}/events`,
        headers: () => ({}),
        lastEventId: '5',
        onEvent: () => {},
        onUnauthorized: resolve,
      });
    });
    await unauthorized;
    expect(requests).toBe(1);
  });
});
