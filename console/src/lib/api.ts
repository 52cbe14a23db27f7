/**
 * The console's only door to the server: same-origin JSON requests with the
 * API key (when one is set) in the Authorization header.
 */
import { readEvents, type SseEvent } from './sse';

const KEY_STORAGE = 'cairn.apiKey';

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface ApiOptions {
  /** Called when the server answers 401: the key is missing or wrong. */
  onUnauthorized: () => void;
  storage: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'>;
}

export class Api {
  constructor(private readonly options: ApiOptions) {}

  get key(): string | null {
    return this.options.storage.getItem(KEY_STORAGE);
  }

  setKey(key: string | null): void {
    if (key === null) this.options.storage.removeItem(KEY_STORAGE);
    else this.options.storage.setItem(KEY_STORAGE, key);
  }

  headers(): Record<string, string> {
    const key = this.key;
    return key ? { authorization: `Bearer ${key}` } : {};
  }

  get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }

  post<T>(path: string, body?: unknown): Promise<T> {
    return this.request<T>('POST', path, body);
  }

  put<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>('PUT', path, body);
  }

  delete(path: string): Promise<void> {
    return this.request<void>('DELETE', path);
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { ...this.headers() };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(path, {
      method,
      headers,
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    if (response.status === 204) return undefined as T;
    const json = (await response.json().catch(() => ({}))) as {
      error?: { code: string; message: string };
    };
    if (!response.ok) throw this.failure(response.status, json);
    return json as T;
  }

  /** POSTs and reads the answer as server-sent events (the streamed chat). */
  async stream(path: string, body: unknown, onEvent: (event: SseEvent) => void): Promise<void> {
    const response = await fetch(path, {
      method: 'POST',
      headers: {
        ...this.headers(),
        'content-type': 'application/json',
        accept: 'text/event-stream',
      },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      const json = (await response.json().catch(() => ({}))) as {
        error?: { code: string; message: string };
      };
      throw this.failure(response.status, json);
    }
    await readEvents(response, onEvent);
  }

  private failure(status: number, json: { error?: { code: string; message: string } }): ApiError {
    if (status === 401) this.options.onUnauthorized();
    return new ApiError(
      status,
      json.error?.code ?? 'HTTP_ERROR',
      json.error?.message ?? `The server answered HTTP ${status}.`,
    );
  }
}
