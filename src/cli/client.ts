/** A small HTTP client for the CLI commands that talk to a running server. */
import { loadSettings } from '../config/settings.js';

export interface ClientOptions {
  url?: string;
}

export function serverUrl(options: ClientOptions): string {
  if (options.url) return options.url.replace(/\/$/, '');
  if (process.env.CAIRN_URL) return process.env.CAIRN_URL.replace(/\/$/, '');
  const settings = loadSettings();
  const host = settings.server.host === '0.0.0.0' ? '127.0.0.1' : settings.server.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${settings.server.port}`;
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
  ) {
    super(message);
  }
}

async function parse(response: Response): Promise<unknown> {
  const text = await response.text();
  const body: unknown = text === '' ? undefined : JSON.parse(text);
  if (!response.ok) {
    const error = (body as { error?: { code?: string; message?: string } } | undefined)?.error;
    throw new ApiError(
      response.status,
      error?.code ?? 'HTTP_ERROR',
      error?.message ?? `HTTP ${response.status}`,
    );
  }
  return body;
}

export async function request(
  options: ClientOptions,
  method: string,
  path: string,
  body?: unknown,
): Promise<unknown> {
  const response = await fetch(`${serverUrl(options)}${path}`, {
    method,
    headers: headers(body !== undefined ? { 'content-type': 'application/json' } : {}),
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return parse(response);
}

/** POSTs and yields each server-sent event as `{ event, data }`. */
export async function* streamEvents(
  options: ClientOptions,
  path: string,
  body: unknown,
): AsyncGenerator<{ event: string; data: unknown }> {
  const response = await fetch(`${serverUrl(options)}${path}`, {
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
