import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { createHttpFetch, httpFetch } from '../../src/llm/http-fetch.js';

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  socket: Socket;
}

let server: http.Server | undefined;

/** A real server on 127.0.0.1 answering each request with `answer`; `seen` lists what reached it. */
async function serve(
  answer: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void,
): Promise<{ base: string; seen: Seen[]; connections: () => number }> {
  const seen: Seen[] = [];
  let connections = 0;
  server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      seen.push({
        method: req.method!,
        url: req.url!,
        headers: req.headers,
        body,
        socket: req.socket,
      });
      answer(req, res, body);
    });
  });
  server.on('connection', () => (connections += 1));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return { base: `http://127.0.0.1:${port}`, seen, connections: () => connections };
}

afterEach(async () => {
  if (!server) return;
  server.closeAllConnections();
  server.close();
  await once(server, 'close');
  server = undefined;
});

describe('httpFetch', () => {
  it('sends the method, headers and body, and hands back status, headers and the body', async () => {
    const { base, seen } = await serve((_req, res, body) => {
      res.writeHead(201, 'Made', { 'content-type': 'application/json', 'x-request-id': 'r-1' });
      res.end(JSON.stringify({ echoed: JSON.parse(body) as unknown }));
    });
    const response = await httpFetch(`${base}/v1/things?x=1`, {
      method: 'POST',
      headers: new Headers({ Authorization: 'Bearer k', 'Content-Type': 'application/json' }),
      body: JSON.stringify({ a: 'é' }),
    });
    expect(response.status).toBe(201);
    expect(response.statusText).toBe('Made');
    expect(response.ok).toBe(true);
    expect(response.headers.get('x-request-id')).toBe('r-1');
    expect(await response.json()).toEqual({ echoed: { a: 'é' } });
    expect(seen[0]).toMatchObject({
      method: 'POST',
      url: '/v1/things?x=1',
      body: '{"a":"é"}',
      headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
    });
  });

  it('takes headers as a plain object or as pairs, and bytes as the body', async () => {
    const { base, seen } = await serve((_req, res) => res.end('ok'));
    await (
      await httpFetch(base, {
        method: 'put',
        headers: { 'X-One': '1' },
        body: new Uint8Array([104, 105]),
      })
    ).text();
    await (
      await httpFetch(new URL(base), {
        method: 'POST',
        headers: [['X-Two', '2']],
        body: new TextEncoder().encode('yo').buffer,
      })
    ).text();
    expect(seen.map((s) => [s.method, s.headers['x-one'] ?? s.headers['x-two'], s.body])).toEqual([
      ['PUT', '1', 'hi'],
      ['POST', '2', 'yo'],
    ]);
  });

  it('asks for compressed answers as fetch does, and decodes a gzipped one', async () => {
    const { base, seen } = await serve((_req, res) => {
      const zipped = gzipSync(JSON.stringify({ reply: 'x'.repeat(5000) }));
      res.writeHead(200, { 'content-encoding': 'gzip', 'content-length': zipped.length });
      res.end(zipped);
    });
    const response = await httpFetch(base);
    expect(seen[0]!.headers['accept-encoding']).toBe('gzip, deflate, br');
    expect(response.headers.get('content-encoding')).toBeNull();
    expect(response.headers.get('content-length')).toBeNull();
    expect(((await response.json()) as { reply: string }).reply).toHaveLength(5000);
  });

  it('keeps the caller’s accept-encoding', async () => {
    const { base, seen } = await serve((_req, res) => res.end('plain'));
    const response = await httpFetch(base, { headers: { 'Accept-Encoding': 'identity' } });
    expect(await response.text()).toBe('plain');
    expect(seen[0]!.headers['accept-encoding']).toBe('identity');
  });

  it('gives a 204 no body, and a 3xx as it came (redirects are not followed)', async () => {
    const { base, seen } = await serve((req, res) => {
      if (req.url === '/none') res.writeHead(204).end();
      else res.writeHead(308, { location: '/elsewhere' }).end();
    });
    const none = await httpFetch(`${base}/none`, { method: 'POST', body: '{}' });
    expect(none.status).toBe(204);
    expect(none.body).toBeNull();
    const moved = await httpFetch(`${base}/moved`, { method: 'POST', body: '{}' });
    expect(moved.status).toBe(308);
    expect(moved.headers.get('location')).toBe('/elsewhere');
    expect(seen.map((s) => s.url)).toEqual(['/none', '/moved']);
    const client = new OpenAI({
      apiKey: 'k',
      baseURL: `${base}/moved`,
      maxRetries: 0,
      fetch: httpFetch,
    });
    const call = client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    });
    await expect(call).rejects.toMatchObject({ status: 308 });
    expect(seen.map((s) => s.url)).toEqual(['/none', '/moved', '/moved/chat/completions']);
  });

  it('reuses one connection for calls one after another', async () => {
    const { base, connections } = await serve((_req, res) => res.end('ok'));
    for (let i = 0; i < 3; i++) expect(await (await httpFetch(base)).text()).toBe('ok');
    expect(connections()).toBe(1);
  });

  it('closes a connection left idle past its limit, and opens a new one for the next call', async () => {
    const { base, seen, connections } = await serve((_req, res) => res.end('ok'));
    // The server would keep it for a minute: only the client can close it within the test's time.
    server!.keepAliveTimeout = 60_000;
    const shortIdle = createHttpFetch(150);
    expect(await (await shortIdle(base)).text()).toBe('ok');
    await once(seen[0]!.socket, 'close');
    expect(await (await shortIdle(base)).text()).toBe('ok');
    expect(connections()).toBe(2);
  });

  it('never cuts a call that takes longer than the idle limit', async () => {
    const { base } = await serve((_req, res) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: one\n\n');
        setTimeout(() => res.end('data: two\n\n'), 300);
      }, 300);
    });
    const shortIdle = createHttpFetch(100);
    expect(await (await shortIdle(base, { method: 'POST', body: '{}' })).text()).toBe(
      'data: one\n\ndata: two\n\n',
    );
  });

  it('streams the body as it arrives', async () => {
    let finish: (() => void) | undefined;
    const { base } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      finish = () => res.end('data: two\n\n');
    });
    const response = await httpFetch(base);
    const reader = response.body!.getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe('data: one\n\n');
    finish!();
    let rest = '';
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
      rest += new TextDecoder().decode(chunk.value);
    expect(rest).toBe('data: two\n\n');
  });

  it('fails with the signal’s reason when aborted before the answer, and closes the connection', async () => {
    const { base, seen } = await serve(() => {});
    const controller = new AbortController();
    const call = httpFetch(base, { method: 'POST', body: '{}', signal: controller.signal });
    await expect.poll(() => seen.length).toBe(1);
    controller.abort(new Error('caller gave up'));
    await expect(call).rejects.toThrow('caller gave up');
    await once(seen[0]!.socket, 'close');
  });

  it('fails as fetch does (an AbortError) when the signal aborts with no reason of its own, or already has', async () => {
    const { base } = await serve(() => {});
    const controller = new AbortController();
    controller.abort();
    await expect(httpFetch(base, { signal: controller.signal })).rejects.toMatchObject({
      name: 'AbortError',
    });
    const string = new AbortController();
    const call = httpFetch(base, { signal: string.signal });
    string.abort('no error object');
    await expect(call).rejects.toMatchObject({ name: 'AbortError' });
  });

  it('errors the body’s stream when aborted while it streams', async () => {
    const { base } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
    });
    const controller = new AbortController();
    const response = await httpFetch(base, { signal: controller.signal });
    const reader = response.body!.getReader();
    await reader.read();
    controller.abort(new Error('stop reading'));
    await expect(reader.read()).rejects.toThrow('stop reading');
  });

  it('errors the body’s stream when the connection breaks mid-answer', async () => {
    const { base } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n', () => res.socket!.destroy());
    });
    const response = await httpFetch(base);
    await expect(response.text()).rejects.toThrow();
  });

  it('fails when nothing listens, and the SDK reports it as a connection error', async () => {
    const { base } = await serve(() => {});
    server!.close();
    await once(server!, 'close');
    server = undefined;
    await expect(httpFetch(base)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    const client = new OpenAI({
      apiKey: 'k',
      baseURL: `${base}/v1`,
      maxRetries: 0,
      fetch: httpFetch,
    });
    await expect(
      client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toBeInstanceOf(OpenAI.APIConnectionError);
  });

  it('leaves what it is not built for (a Request, a form body) to the global fetch', async () => {
    const { base, seen } = await serve((_req, res) => res.end('ok'));
    expect(await (await httpFetch(new Request(`${base}/request`))).text()).toBe('ok');
    const form = new URLSearchParams({ a: '1' });
    expect(await (await httpFetch(`${base}/form`, { method: 'POST', body: form })).text()).toBe(
      'ok',
    );
    expect(seen.map((s) => [s.url, s.body])).toEqual([
      ['/request', ''],
      ['/form', 'a=1'],
    ]);
  });
});
