/**
 * A scripted fake of the Anthropic Messages API, for tests and the bench.
 *
 * Real HTTP on 127.0.0.1, `POST /v1/messages`, JSON or SSE in Anthropic's
 * event format (message_start, content_block_start/delta/stop, ping,
 * message_delta, message_stop, error), so the official SDK is exercised end
 * to end. Each request is checked with `validateAnthropicRequest` and refused
 * with a 400 the way the API refuses it. Prompt caching is accounted by
 * prefix, as the API does: a request reads from the cache the longest prefix
 * (tools, system, messages, block by block) that ended at a `cache_control`
 * breakpoint of an earlier request, and writes the prefix up to its own last
 * breakpoint; only prefixes of at least `minCacheableTokens` are cached.
 * Replies come from a FIFO script, then a default function, then an echo,
 * and can inject the faults the API produces.
 */
import { createHash, type Hash } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { contentBlocks, validateAnthropicRequest } from './anthropic-request-validator.js';

export interface FakeAnthropicToolUse {
  id?: string;
  name: string;
  /** The input as JSON text (streamed as `input_json_delta` fragments). */
  arguments: string;
}

export interface FakeAnthropicReply {
  content?: string;
  tool_calls?: FakeAnthropicToolUse[];
  /** Default: `tool_use` with tool calls, else `end_turn`. */
  stop_reason?: 'end_turn' | 'tool_use' | 'max_tokens' | 'stop_sequence' | 'refusal';
  /** Default: estimated from the reply (characters / 4). */
  output_tokens?: number;

  // Faults.
  /** Answer with this status and an Anthropic error body (529: overloaded_error). */
  status?: number;
  errorBody?: unknown;
  headers?: Record<string, string>;
  delayMs?: number;
  hang?: boolean;
  /** Send 200 and the first bytes of the body, then go silent. */
  stallMidBody?: boolean;
  /** Streaming only: send message_start and the first text delta, then go silent. */
  stallAfterFirstChunk?: boolean;
  /** Streaming only: end the stream cleanly before message_delta and message_stop. */
  noStop?: boolean;
  /** Streaming only: send an `event: error` (this type) after the first text delta, then end. */
  streamError?: 'overloaded_error' | 'api_error' | 'invalid_request_error';
  /** Streaming only: destroy the socket in the middle of the tool input (or the text). */
  resetMidStream?: boolean;
}

export interface RecordedAnthropicRequest {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary request fields
  body: any;
  headers: Record<string, string | string[] | undefined>;
  problems: string[];
  path: string;
  /** The usage the fake reported for it (accepted requests only). */
  usage?: FakeUsage;
}

export interface FakeUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

export interface FakeAnthropicServer {
  /** e.g. `http://127.0.0.1:PORT` (the SDK appends `/v1/messages`). */
  baseURL: string;
  requests: RecordedAnthropicRequest[];
  script(...replies: FakeAnthropicReply[]): void;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as for RecordedAnthropicRequest.body
  setDefault(fn: (body: any) => FakeAnthropicReply): void;
  /** Clears the script, the requests, the default and the prompt cache. */
  reset(): void;
  close(): Promise<void>;
}

export interface FakeAnthropicServerOptions {
  /** Refuse prompts over this many estimated tokens with "prompt is too long". */
  contextWindowTokens?: number;
  /** Prefixes shorter than this are not cached (the API's minimum is 1024 for most models). */
  minCacheableTokens?: number;
}

const MESSAGES_PATH = '/v1/messages';
const STREAM_PIECES = 3;

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The characters of a block a model reads (its text, tool input, result). */
function blockChars(block: Json): number {
  switch (block.type) {
    case 'text':
      return typeof block.text === 'string' ? block.text.length : 0;
    case 'tool_use':
      return String(block.name).length + JSON.stringify(block.input ?? {}).length;
    case 'tool_result':
      return typeof block.content === 'string'
        ? block.content.length
        : contentBlocks(block.content).reduce((n, b) => n + blockChars(b), 0);
    default:
      return JSON.stringify(block).length;
  }
}

interface PrefixUnit {
  /** The block as hashed: what it says, without its cache mark. */
  canonical: string;
  tokens: number;
  breakpoint: boolean;
}

/**
 * The request as the cache sees it: tools, then system blocks, then each
 * message's blocks (role included), in order. Tokens are characters / 4.
 */
function prefixUnits(body: Json): PrefixUnit[] {
  const units: PrefixUnit[] = [];
  const add = (kind: string, block: Json, chars: number): void => {
    const { cache_control: mark, ...rest } = block;
    units.push({
      canonical: `${kind}:${JSON.stringify(rest)}`,
      tokens: Math.ceil(chars / 4),
      breakpoint: mark !== undefined && mark !== null,
    });
  };
  for (const tool of Array.isArray(body.tools) ? body.tools.filter(isRecord) : [])
    add('tool', tool, JSON.stringify(tool).length);
  for (const block of contentBlocks(body.system)) add('system', block, blockChars(block));
  for (const message of Array.isArray(body.messages) ? body.messages.filter(isRecord) : [])
    for (const block of contentBlocks(message.content))
      add(String(message.role), block, blockChars(block));
  return units;
}

/** The fake's estimate of a request's prompt tokens. */
export function estimateAnthropicPromptTokens(body: unknown): number {
  return isRecord(body) ? prefixUnits(body).reduce((n, u) => n + u.tokens, 0) : 0;
}

/**
 * The prompt cache: hashes of the prefixes earlier requests marked.
 * `account` reports what a request reads, writes and pays in full.
 */
class PrefixCache {
  private readonly cached = new Set<string>();

  constructor(private readonly minTokens: number) {}

  account(body: Json): Omit<FakeUsage, 'output_tokens'> {
    const units = prefixUnits(body);
    const hash: Hash = createHash('sha256');
    let tokens = 0;
    let read = 0;
    let lastBreakpointTokens = 0;
    const marked: string[] = [];
    for (const unit of units) {
      hash.update(unit.canonical);
      hash.update('\u0000');
      tokens += unit.tokens;
      const digest = hash.copy().digest('hex');
      if (this.cached.has(digest)) read = tokens;
      if (unit.breakpoint) {
        lastBreakpointTokens = tokens;
        if (tokens >= this.minTokens) marked.push(digest);
      }
    }
    // A read counts only up to the last breakpoint: after it nothing is looked up.
    read = Math.min(read, lastBreakpointTokens);
    const written = lastBreakpointTokens >= this.minTokens ? lastBreakpointTokens - read : 0;
    for (const digest of marked) this.cached.add(digest);
    return {
      input_tokens: tokens - read - written,
      cache_creation_input_tokens: written,
      cache_read_input_tokens: read,
    };
  }

  clear(): void {
    this.cached.clear();
  }
}

export async function startFakeAnthropicServer(
  options: FakeAnthropicServerOptions = {},
): Promise<FakeAnthropicServer> {
  const requests: RecordedAnthropicRequest[] = [];
  const cache = new PrefixCache(options.minCacheableTokens ?? 1024);
  let queue: FakeAnthropicReply[] = [];
  let defaultReply: ((body: unknown) => FakeAnthropicReply) | undefined;
  let requestCount = 0;
  let toolUseCount = 0;
  let closing = false;
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  const server = createServer((req, res) => {
    const number = ++requestCount;
    res.setHeader('request-id', `req_fake_${number}`);
    readBody(req)
      .then((raw) => handle(req, res, raw, number))
      .catch((err: unknown) => {
        if (res.headersSent) res.destroy();
        else
          sendJson(
            res,
            500,
            errorBody('api_error', `fake Anthropic server failed: ${String(err)}`),
          );
      });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  function handle(req: IncomingMessage, res: ServerResponse, raw: string, number: number): void {
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const record = (body: unknown, problems: string[]): RecordedAnthropicRequest => {
      const entry = { body, headers: { ...req.headers }, problems, path };
      requests.push(entry);
      return entry;
    };
    if (req.method !== 'POST' || path !== MESSAGES_PATH) {
      record(raw, [`no route for ${req.method} ${path}`]);
      sendJson(res, 404, errorBody('not_found_error', `Not found: ${path}`));
      return;
    }
    if (req.headers['x-api-key'] === undefined && req.headers.authorization === undefined) {
      record(raw, ['no API key (x-api-key or authorization header)']);
      sendJson(res, 401, errorBody('authentication_error', 'x-api-key header is required'));
      return;
    }
    let body: unknown;
    try {
      body = JSON.parse(raw);
    } catch {
      record(raw, ['request body is not valid JSON']);
      sendJson(res, 400, errorBody('invalid_request_error', 'The request body is not valid JSON.'));
      return;
    }
    const problems = validateAnthropicRequest(body);
    const entry = record(body, problems);
    if (problems.length > 0) {
      sendJson(res, 400, errorBody('invalid_request_error', problems.join('; ')));
      return;
    }
    const request = body as Json;
    if (options.contextWindowTokens !== undefined) {
      const tokens = estimateAnthropicPromptTokens(request);
      if (tokens > options.contextWindowTokens) {
        sendJson(
          res,
          400,
          errorBody(
            'invalid_request_error',
            `prompt is too long: ${tokens} tokens > ${options.contextWindowTokens} maximum`,
          ),
        );
        return;
      }
    }
    const reply = queue.shift() ?? defaultReply?.(request) ?? echoReply(request);
    const send = (): void => {
      if (res.destroyed) return;
      for (const [name, value] of Object.entries(reply.headers ?? {})) res.setHeader(name, value);
      if (reply.status !== undefined) {
        sendJson(res, reply.status, reply.errorBody ?? defaultErrorBody(reply.status));
        return;
      }
      if (reply.stallMidBody) {
        res.writeHead(200, {
          'content-type': request.stream === true ? 'text/event-stream' : 'application/json',
        });
        res.write(request.stream === true ? 'event: message_start\ndata: {"type":' : '{"id":"x",');
        return;
      }
      // The cache is read and written only by a request the model answers.
      const usage = { ...cache.account(request), output_tokens: 0 };
      const message = buildMessage(request, reply, number, usage);
      entry.usage = message.usage;
      if (request.stream === true) streamMessage(res, message, reply);
      else sendJson(res, 200, wireMessage(message));
    };
    if (reply.hang) return;
    if (reply.delayMs !== undefined && reply.delayMs > 0) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        send();
      }, reply.delayMs);
      timers.add(timer);
    } else send();
  }

  function buildMessage(
    body: Json,
    reply: FakeAnthropicReply,
    number: number,
    usage: FakeUsage,
  ): FakeMessage {
    const content: FakeBlock[] = [];
    if (reply.content) content.push({ type: 'text', text: reply.content });
    for (const call of reply.tool_calls ?? [])
      content.push({
        type: 'tool_use',
        id: call.id ?? `toolu_fake_${++toolUseCount}`,
        name: call.name,
        arguments: call.arguments,
      });
    const outChars = content.reduce(
      (n, b) => n + (b.type === 'text' ? b.text.length : b.arguments.length),
      0,
    );
    return {
      id: `msg_fake_${number}`,
      model: typeof body.model === 'string' ? body.model : 'claude-fake',
      content,
      stop_reason:
        reply.stop_reason ?? ((reply.tool_calls?.length ?? 0) > 0 ? 'tool_use' : 'end_turn'),
      usage: {
        ...usage,
        output_tokens: reply.output_tokens ?? Math.max(1, Math.ceil(outChars / 4)),
      },
    };
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}`,
    requests,
    script(...replies) {
      queue.push(...replies);
    },
    setDefault(fn) {
      defaultReply = fn;
    },
    reset() {
      queue = [];
      requests.length = 0;
      defaultReply = undefined;
      cache.clear();
    },
    async close() {
      if (closing) return;
      closing = true;
      for (const timer of timers) clearTimeout(timer);
      const closed = new Promise<void>((resolve, reject) =>
        server.close((err) => (err ? reject(err) : resolve())),
      );
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

type FakeBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; arguments: string };

interface FakeMessage {
  id: string;
  model: string;
  content: FakeBlock[];
  stop_reason: string;
  usage: FakeUsage;
}

function parsedInput(args: string): unknown {
  try {
    const value: unknown = JSON.parse(args);
    return isRecord(value) ? value : {};
  } catch {
    return {};
  }
}

function wireMessage(m: FakeMessage): Json {
  return {
    id: m.id,
    type: 'message',
    role: 'assistant',
    model: m.model,
    content: m.content.map((b) =>
      b.type === 'text'
        ? b
        : { type: 'tool_use', id: b.id, name: b.name, input: parsedInput(b.arguments) },
    ),
    stop_reason: m.stop_reason,
    stop_sequence: null,
    usage: m.usage,
  };
}

function streamMessage(res: ServerResponse, m: FakeMessage, reply: FakeAnthropicReply): void {
  const event = (type: string, data: Json): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  const events: string[] = [
    event('message_start', {
      message: {
        ...wireMessage({ ...m, content: [] }),
        stop_reason: null,
        usage: { ...m.usage, output_tokens: 1 },
      },
    }),
    'event: ping\ndata: {"type": "ping"}\n\n',
  ];
  let firstText: number | undefined;
  let midInput: number | undefined;
  m.content.forEach((block, index) => {
    if (block.type === 'text') {
      events.push(
        event('content_block_start', { index, content_block: { type: 'text', text: '' } }),
      );
      for (const piece of pieces(block.text)) {
        events.push(
          event('content_block_delta', { index, delta: { type: 'text_delta', text: piece } }),
        );
        firstText ??= events.length - 1;
      }
    } else {
      events.push(
        event('content_block_start', {
          index,
          content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
        }),
      );
      for (const piece of pieces(block.arguments)) {
        events.push(
          event('content_block_delta', {
            index,
            delta: { type: 'input_json_delta', partial_json: piece },
          }),
        );
        midInput ??= events.length - 1;
      }
    }
    events.push(event('content_block_stop', { index }));
  });
  const upTo = (last: number): string => events.slice(0, last + 1).join('');
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const first = firstText ?? 1;
  if (reply.stallAfterFirstChunk) {
    res.write(upTo(first));
  } else if (reply.streamError) {
    res.end(
      upTo(first) +
        `event: error\ndata: ${JSON.stringify(errorBody(reply.streamError, reply.streamError === 'overloaded_error' ? 'Overloaded' : 'Internal server error'))}\n\n`,
    );
  } else if (reply.resetMidStream) {
    res.write(upTo(midInput ?? first), () => res.socket?.destroy());
  } else if (reply.noStop) {
    res.end(events.join(''));
  } else {
    res.end(
      events.join('') +
        event('message_delta', {
          delta: { stop_reason: m.stop_reason, stop_sequence: null },
          usage: { output_tokens: m.usage.output_tokens },
        }) +
        event('message_stop', {}),
    );
  }
}

function pieces(text: string): string[] {
  if (text === '') return [];
  const size = Math.ceil(text.length / STREAM_PIECES);
  const out: string[] = [];
  for (let start = 0; start < text.length; start += size) out.push(text.slice(start, start + size));
  return out;
}

function echoReply(body: Json): FakeAnthropicReply {
  const messages = Array.isArray(body.messages) ? body.messages.filter(isRecord) : [];
  const lastUser = messages.findLast((m) => m.role === 'user');
  const text = contentBlocks(lastUser?.content)
    .filter((b) => b.type === 'text')
    .map((b) => String(b.text))
    .join(' ');
  return { content: `echo: ${text}` };
}

function errorBody(type: string, message: string): Json {
  return { type: 'error', error: { type, message } };
}

function defaultErrorBody(status: number): Json {
  if (status === 529) return errorBody('overloaded_error', 'Overloaded');
  if (status === 429)
    return errorBody(
      'rate_limit_error',
      'Number of request tokens has exceeded your per-minute rate limit',
    );
  if (status === 401) return errorBody('authentication_error', 'invalid x-api-key');
  if (status === 402)
    return errorBody(
      'billing_error',
      'Your credit balance is too low to access the Anthropic API.',
    );
  if (status >= 500) return errorBody('api_error', 'Internal server error');
  return errorBody('invalid_request_error', `Fake error with status ${status}.`);
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
