/**
 * The `fetch` the model SDKs are given: node:http(s) behind the Fetch API's
 * shape. Node's own fetch (undici) turns a request's JSON text into a web
 * stream, tees it (in case a redirect has to resend it) and builds the
 * spec's objects around every part; on a model call that is most of what
 * the call costs the server. Measured against a local model server, a
 * 40-message request: about 250 µs of CPU a call through the global fetch,
 * about 140 µs here, and some 100 KB less garbage (bench: the growing
 * conversation's median turn, 1.8 → 1.6 ms).
 *
 * What an API client needs is kept: keep-alive connections (closed after
 * IDLE_SOCKET_MS unused, as undici's are, or sooner when the server's
 * Keep-Alive header says so: a NAT or proxy on the way may have dropped an
 * idle connection without a word, and a request written into it would wait
 * for the call's whole timeout), compressed
 * answers decoded (asked for as fetch asks), the abort signal (before the
 * answer and while its body streams), the body as a web stream the SDKs
 * read as they do fetch's. What it leaves out, on purpose: redirects are not
 * followed (a model API that redirects a POST is misconfigured; the SDK
 * reports the 3xx as an error with its status), and no cookies or cache.
 * Any request it is not built for (a Request object, a streamed or form
 * body) goes to the global fetch unchanged.
 */
import http from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import zlib from 'node:zlib';

/** How long a kept-alive connection may sit unused before it is closed (undici's default). */
export const IDLE_SOCKET_MS = 4_000;

/** Statuses whose response has no body (a Response with one would throw). */
const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** What fetch asks for unless the caller says otherwise. */
const ACCEPT_ENCODING = 'gzip, deflate, br';

function decoderFor(encoding: string | undefined): NodeJS.ReadWriteStream | undefined {
  switch (encoding?.trim().toLowerCase()) {
    case 'gzip':
    case 'x-gzip':
      return zlib.createGunzip();
    case 'deflate':
      return zlib.createInflate();
    case 'br':
      return zlib.createBrotliDecompress();
    default:
      return undefined;
  }
}

function headerRecord(headers: RequestInit['headers']): Record<string, string> {
  const out: Record<string, string> = {};
  if (headers === undefined) return out;
  if (headers instanceof Headers) headers.forEach((value, name) => (out[name] = value));
  else if (Array.isArray(headers))
    for (const [name, value] of headers) out[name!.toLowerCase()] = value!;
  else
    for (const [name, value] of Object.entries(headers as Record<string, string>))
      out[name.toLowerCase()] = value;
  return out;
}

/** A body sent as it is: text or bytes. Anything else is left to the global fetch. */
function plainBody(body: RequestInit['body']): string | Uint8Array | undefined | false {
  if (body === undefined || body === null) return undefined;
  if (typeof body === 'string' || body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  return false;
}

/** What the call fails with when `signal` aborts it: its reason, as fetch does, when that is an error. */
function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error
    ? reason
    : new DOMException('This operation was aborted', 'AbortError');
}

/**
 * A fetch with its own keep-alive pools (one per protocol). Node's agents
 * close a pooled connection after `idleSocketMs` without a request; a
 * request in flight is never cut by it, however long the model takes.
 */
export function createHttpFetch(idleSocketMs = IDLE_SOCKET_MS): typeof fetch {
  const agents = {
    'http:': new http.Agent({ keepAlive: true, timeout: idleSocketMs }),
    'https:': new https.Agent({ keepAlive: true, timeout: idleSocketMs }),
  };
  return (input, init) => send(agents, input, init);
}

/** The fetch of every model client of the process. */
export const httpFetch = createHttpFetch();

function send(
  agents: { 'http:': http.Agent; 'https:': https.Agent },
  input: Parameters<typeof fetch>[0],
  init: RequestInit = {},
): Promise<Response> {
  const body = plainBody(init.body);
  const target = typeof input === 'string' ? input : input instanceof URL ? input.href : undefined;
  if (target === undefined || body === false) return fetch(input, init);
  const url = new URL(target);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return fetch(input, init);
  const signal = init.signal ?? undefined;
  if (signal?.aborted) return Promise.reject(abortError(signal));

  return new Promise<Response>((resolve, reject) => {
    const headers = headerRecord(init.headers);
    headers['accept-encoding'] ??= ACCEPT_ENCODING;
    const method = (init.method ?? 'GET').toUpperCase();
    let answer: http.IncomingMessage | undefined;
    const onAbort = (): void => {
      const error = abortError(signal!);
      answer?.destroy(error);
      request.destroy(error);
    };
    const client = url.protocol === 'https:' ? https : http;
    const request = client.request(
      url,
      { method, headers, agent: agents[url.protocol as 'http:' | 'https:'] },
      (res) => {
        answer = res;
        const status = res.statusCode ?? 0;
        const empty = NULL_BODY_STATUSES.has(status) || method === 'HEAD';
        const decoder = empty ? undefined : decoderFor(res.headers['content-encoding']);
        const responseHeaders = new Headers();
        for (let i = 0; i < res.rawHeaders.length; i += 2) {
          const name = res.rawHeaders[i]!;
          // The body handed on is decoded: its length and encoding are no longer the wire's.
          if (decoder && /^content-(encoding|length)$/i.test(name)) continue;
          responseHeaders.append(name, res.rawHeaders[i + 1]!);
        }
        let stream: Readable = res;
        if (decoder) {
          stream = res.pipe(decoder) as unknown as Readable;
          res.once('error', (err) => stream.destroy(err));
        }
        if (empty) res.resume();
        resolve(
          new Response(empty ? null : (Readable.toWeb(stream) as ReadableStream<Uint8Array>), {
            status,
            statusText: res.statusMessage ?? '',
            headers: responseHeaders,
          }),
        );
      },
    );
    signal?.addEventListener('abort', onAbort, { once: true });
    request.once('close', () => signal?.removeEventListener('abort', onAbort));
    // Before the answer: the call fails as fetch's does. After it, the body's stream carries the error.
    request.on('error', reject);
    request.end(body);
  });
}
