/** A small HTTP client for the CLI commands that talk to a running server. */
import { loadSettings } from '../config/settings.js';
import { findServerAddress, localUrlOf, serverAddressPath } from './server-address.js';

export interface ClientOptions {
  url?: string;
  /** Where `url` came from, for the error that says it could not be reached. */
  urlSource?: string;
}

/** A server's base URL and, for people, where it came from. */
export interface ServerTarget {
  url: string;
  urlSource: string;
}

/**
 * The server a client command talks to: `--url`, then CAIRN_URL, then the
 * address a running `cairn serve` recorded in the home (CAIRN_HOME or the
 * working directory), then the host and port of the settings. A URL given
 * without a scheme (`127.0.0.1:5300`) means http://; anything else that is
 * not an http(s) URL is refused with what to type instead. Resolved once per
 * command, so every request of it goes to the same server.
 */
export function resolveServer(options: ClientOptions): ServerTarget {
  if (options.url !== undefined && options.url !== '')
    return { url: normalizeServerUrl(options.url), urlSource: options.urlSource ?? '--url' };
  const fromEnv = process.env.CAIRN_URL;
  if (fromEnv !== undefined && fromEnv !== '')
    return { url: normalizeServerUrl(fromEnv), urlSource: 'CAIRN_URL' };
  const settings = loadSettings();
  const recorded = findServerAddress(settings.home);
  if (recorded !== undefined)
    return {
      url: recorded.url,
      urlSource: `recorded by cairn serve (pid ${recorded.pid}) in ${serverAddressPath(settings.home)}`,
    };
  return {
    url: localUrlOf(settings.server.host, settings.server.port),
    urlSource: `server.host and server.port of ${settings.home}/cairn.json, CAIRN_HOST or CAIRN_PORT; no cairn serve is running in that home`,
  };
}

/** The server's base URL (see `resolveServer`). */
export function serverUrl(options: ClientOptions): string {
  return resolveServer(options).url;
}

/** `127.0.0.1:5300` → `http://127.0.0.1:5300`; trailing slashes dropped; a bad URL throws. */
export function normalizeServerUrl(given: string): string {
  const trimmed = given.trim();
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(trimmed) ? trimmed : `http://${trimmed}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new CliUsageError(
      `"${given}" is not a server URL. Use e.g. --url http://127.0.0.1:5050 (or set CAIRN_URL).`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new CliUsageError(
      `"${given}" is not an http(s) URL. Use e.g. --url http://127.0.0.1:5050 (or set CAIRN_URL).`,
    );
  }
  return withScheme.replace(/\/+$/, '');
}

/** A mistake in how the CLI was called: printed as one line, exit 1. */
export class CliUsageError extends Error {}

/** The server could not be reached at `url`. */
export class UnreachableError extends Error {
  constructor(
    readonly url: string,
    cause: unknown,
    /** Where the server's address came from (`--url`, CAIRN_URL, the record, the settings). */
    source?: string,
  ) {
    const reason = (cause as { cause?: { code?: string } }).cause?.code;
    super(
      `could not reach the Cairn server at ${url}${reason ? ` (${reason})` : ''}${source ? `, the address from ${source}` : ''}. Is \`cairn serve\` running there? (set CAIRN_URL or --url)`,
    );
  }
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const key = process.env.CAIRN_API_KEY;
  return { ...(key ? { authorization: `Bearer ${key}` } : {}), ...extra };
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** The base URL of the server that answered (its console's address, for hints). */
    readonly server = '',
  ) {
    super(message);
  }
}

async function parse(response: Response): Promise<unknown> {
  const text = await response.text();
  let body: unknown;
  try {
    body = text === '' ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!response.ok) {
    const error = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(
      response.status,
      error?.code ?? 'HTTP_ERROR',
      error?.message ?? `HTTP ${response.status} from ${response.url}`,
      response.url === '' ? '' : new URL(response.url).origin,
    );
  }
  return body;
}

/** fetch, with a network failure turned into an error naming the URL tried. */
export async function send(url: string, init: RequestInit, source?: string): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (err) {
    throw new UnreachableError(url, err, source);
  }
}

/** fetch of `path` on the server of `options`; a network failure names the URL and where it came from. */
function sendTo(options: ClientOptions, path: string, init: RequestInit): Promise<Response> {
  const { url, urlSource } = resolveServer(options);
  return send(`${url}${path}`, init, urlSource);
}

export async function request(
  options: ClientOptions,
  method: string,
  path: string,
  body?: unknown,
): Promise<unknown> {
  const response = await sendTo(options, path, {
    method,
    headers: headers(body !== undefined ? { 'content-type': 'application/json' } : {}),
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return parse(response);
}

/** GET that hands back the raw response (for streamed downloads); errors as `request`. */
export async function download(options: ClientOptions, path: string): Promise<Response> {
  const response = await sendTo(options, path, { headers: headers() });
  if (!response.ok) await parse(response);
  return response;
}

/** POST of a raw body (for streamed uploads); errors as `request`. */
export async function upload(
  options: ClientOptions,
  path: string,
  contentType: string,
  body: ReadableStream<Uint8Array> | string,
): Promise<unknown> {
  const response = await sendTo(options, path, {
    method: 'POST',
    headers: headers({ 'content-type': contentType }),
    body,
    ...(typeof body === 'string' ? {} : { duplex: 'half' }),
  });
  return parse(response);
}

/** POSTs and yields each server-sent event as `{ event, data }`. */
export async function* streamEvents(
  options: ClientOptions,
  path: string,
  body: unknown,
): AsyncGenerator<{ event: string; data: unknown }> {
  const response = await sendTo(options, path, {
    method: 'POST',
    headers: headers({ 'content-type': 'application/json', accept: 'text/event-stream' }),
    body: JSON.stringify(body),
  });
  if (!response.ok || !response.body) {
    await parse(response);
    return;
  }
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = 'message';
      let data = '';
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) event = line.slice(7);
        else if (line.startsWith('data: ')) data += line.slice(6);
      }
      if (data !== '') yield { event, data: JSON.parse(data) as unknown };
    }
  }
}
