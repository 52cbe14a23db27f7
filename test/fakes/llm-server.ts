/**
 * A scripted fake of an OpenAI-compatible chat-completions server, for tests.
 *
 * It speaks the real wire protocol over real HTTP (non-streaming and SSE), so
 * Cairn's actual OpenAI client is exercised end to end. Each request is checked
 * with `validateChatRequest` and rejected the way a provider would if it breaks
 * the schema or the message-sequence rules; replies come from a FIFO script,
 * then from a default function, then from an echo. Replies can also inject the
 * faults real providers produce (error statuses, delays, hangs, broken streams).
 */
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { validateChatRequest } from './openai-request-validator.js';
import { conceptEmbedding } from './concept-embeddings.js';

export interface FakeToolCall {
  id?: string;
  name: string;
  arguments: string;
}

export interface FakeReply {
  /** Assistant text (default '' when tool_calls are given). */
  content?: string;
  /** Ids default to `call_<n>`, unique for the server's lifetime. */
  tool_calls?: FakeToolCall[];
  /** Default: 'tool_calls' if there are tool calls, else 'stop'. */
  finish_reason?: 'stop' | 'tool_calls' | 'length' | null;
  /** Default: estimated as characters / 4 of the request's messages and of the reply. */
  usage?: {
    prompt_tokens: number;
    completion_tokens: number;
    /** OpenAI's report of the prompt tokens served from its prompt cache. */
    prompt_tokens_details?: { cached_tokens: number };
  };

  // Faults.
  /** Answer with this HTTP status and an OpenAI-style error body (plain JSON even for stream requests). */
  status?: number;
  /** Overrides the error JSON body sent with `status`. */
  errorBody?: unknown;
  /** Extra response headers, e.g. `{ 'retry-after': '2' }`. */
  headers?: Record<string, string>;
  /** Wait this long before sending headers. */
  delayMs?: number;
  /** Never answer (until the server is closed). */
  hang?: boolean;
  /**
   * Send `200` and the headers, then the first bytes of the body (`{"id":"x",`,
   * or `data: {"id":"x",` for a stream), then go silent: a provider that stalls
   * mid-body.
   */
  stallMidBody?: boolean;
  /** Streaming only: send the first chunk, then go silent. */
  stallAfterFirstChunk?: boolean;
  /** Streaming only: end the stream cleanly with no finish_reason, no usage and no `[DONE]`. */
  noFinish?: boolean;
  /** Streaming only: send a `data: {"error":{...}}` event mid-stream, then end. */
  streamError?: boolean;
  /** Streaming only: destroy the socket in the middle of the tool-call arguments (or of the content if there are no tool calls). */
  resetMidStream?: boolean;
}

/** A provider's refusal of a request longer than its window, as OpenAI words it. */
export const CONTEXT_OVERFLOW_REPLY: FakeReply = {
  status: 400,
  errorBody: {
    error: {
      message: "This model's maximum context length is 100 tokens.",
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded',
    },
  },
};

export interface RecordedRequest {
  /** Parsed JSON body; the raw text if it was not JSON; undefined if empty. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- tests read arbitrary request fields
  body: any;
  headers: Record<string, string | string[] | undefined>;
  /** The body exactly as received (UTF-8 text). */
  raw: string;
  /** Why the fake rejected the request as malformed (validator problems, bad JSON, unknown URL); empty if accepted. A context-length overflow is not listed: the request itself is valid. */
  problems: string[];
  method: string;
  /** URL path, e.g. `/v1/chat/completions`. */
  path: string;
}

export interface FakeLlmServer {
  /** e.g. `http://127.0.0.1:PORT/v1` */
  baseURL: string;
  /** Every request received, including rejected ones, in arrival order. */
  requests: RecordedRequest[];
  /** Queue replies, consumed FIFO by accepted chat-completions requests. */
  script(...replies: FakeReply[]): void;
  /** Used when the queue is empty. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- as for RecordedRequest.body
  setDefault(fn: (body: any) => FakeReply): void;
  /** Clear the queue, the recorded requests and the default. */
  reset(): void;
  /**
   * How `/v1/embeddings` answers from now on: `ok` (concept vectors,
   * concept-embeddings.ts), `fail` (503, as a provider outage) or `hang`
   * (never answers). `reset` leaves it as it is.
   */
  setEmbeddings(mode: 'ok' | 'fail' | 'hang'): void;
  /** Stop listening and cut every open connection, hung ones included. */
  close(): Promise<void>;
}

export interface FakeLlmServerOptions {
  /** Reject requests whose estimated prompt exceeds this many tokens, with OpenAI's `context_length_exceeded` error. */
  contextWindowTokens?: number;
  /** Check every request with `validateChatRequest` (default true). */
  validate?: boolean;
  /**
   * Count only the prompt against `contextWindowTokens`, not the output the
   * request asks for (`max_tokens`), as some OpenAI-compatible servers do
   * (llama.cpp's). Default false: the prompt plus the requested output must fit, as on OpenAI.
   */
  promptOnlyWindow?: boolean;
}

const CHAT_COMPLETIONS_PATH = '/v1/chat/completions';
const MODELS_PATH = '/v1/models';
const EMBEDDINGS_PATH = '/v1/embeddings';
const FAKE_MODEL_ID = 'fake-model';
const SERVER_ERROR_MESSAGE =
  'The server had an error while processing your request. Sorry about that!';
/** How many deltas content and tool-call arguments are split into when streaming. */
const STREAM_PIECES = 3;

/** The fake's token estimate of a request's prompt: characters of message contents and tool-call arguments / 4. */
export function estimatePromptTokens(body: unknown): number {
  let chars = 0;
  for (const message of messagesOf(body)) {
    chars += contentText(message.content).length;
    if (!Array.isArray(message.tool_calls)) continue;
    for (const call of message.tool_calls as unknown[]) {
      const args = isRecord(call) && isRecord(call.function) ? call.function.arguments : undefined;
      if (typeof args === 'string') chars += args.length;
    }
  }
  return Math.ceil(chars / 4);
}

/** The completion tokens a request asks for (`max_completion_tokens` or `max_tokens`), 0 when it sets none. */
export function requestedOutputTokens(body: unknown): number {
  if (!isRecord(body)) return 0;
  const asked = body.max_completion_tokens ?? body.max_tokens;
  return typeof asked === 'number' ? asked : 0;
}

/** Starts a fake on 127.0.0.1 with an ephemeral port. Close it in `afterAll`/`afterEach`. */
export async function startFakeLlmServer(
  options: FakeLlmServerOptions = {},
): Promise<FakeLlmServer> {
  const validate = options.validate ?? true;
  const requests: RecordedRequest[] = [];
  let queue: FakeReply[] = [];
  let defaultReply: ((body: unknown) => FakeReply) | undefined;
  let requestCount = 0;
  let toolCallCount = 0;
  let closing = false;
  let embeddings: 'ok' | 'fail' | 'hang' = 'ok';

  // Hung and stalled replies keep their connections open forever; close()
  // must cut them, or it would wait on them (and keep-alive sockets) forever.
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();

  const server = createServer((req, res) => {
    const requestNumber = ++requestCount;
    res.setHeader('x-request-id', `req_fake_${requestNumber}`);
    readBody(req)
      .then((raw) => handle(req, res, raw, requestNumber))
      .catch((err: unknown) => {
        // A bug in the fake or a throwing setDefault function: fail loudly
        // rather than leave the client hanging.
        if (res.headersSent) {
          res.destroy();
        } else {
          sendJson(res, 500, errorBody(`fake LLM server failed: ${String(err)}`, 'server_error'));
        }
      });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  function handle(
    req: IncomingMessage,
    res: ServerResponse,
    raw: string,
    requestNumber: number,
  ): void {
    const method = req.method ?? 'GET';
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const record = (body: unknown, problems: string[]): void => {
      requests.push({ body, headers: { ...req.headers }, raw, problems, method, path });
    };

    if (method === 'GET' && path === MODELS_PATH) {
      record(undefined, []);
      sendJson(res, 200, {
        object: 'list',
        data: [
          { id: FAKE_MODEL_ID, object: 'model', created: nowSeconds(), owned_by: 'cairn-fake' },
        ],
      });
      return;
    }
    if (method === 'POST' && path === EMBEDDINGS_PATH) {
      const body = parseJsonOr(raw);
      const problems = embeddingProblems(body);
      record(body, problems);
      if (problems.length > 0) {
        sendJson(res, 400, errorBody(problems.join('; '), 'invalid_request_error', 'input'));
        return;
      }
      if (embeddings === 'hang') return; // close() destroys the socket
      if (embeddings === 'fail') {
        sendJson(res, 503, errorBody(SERVER_ERROR_MESSAGE, 'server_error'));
        return;
      }
      sendJson(res, 200, embeddingAnswer(body as EmbeddingRequest));
      return;
    }
    if (method !== 'POST' || path !== CHAT_COMPLETIONS_PATH) {
      record(raw === '' ? undefined : parseJsonOr(raw), [`no route for ${method} ${path}`]);
      sendJson(res, 404, errorBody(`Invalid URL (${method} ${path})`, 'invalid_request_error'));
      return;
    }

    let body: unknown;
    try {
      body = JSON.parse(raw);
    } catch {
      record(raw, ['request body is not valid JSON']);
      sendJson(
        res,
        400,
        errorBody('We could not parse the JSON body of your request.', 'invalid_request_error'),
      );
      return;
    }

    // Rejections below do not consume a scripted reply: the script describes
    // what the model says, and a rejected request never reaches the model.
    const problems = validate ? validateChatRequest(body) : [];
    record(body, problems);
    if (problems.length > 0) {
      sendJson(res, 400, errorBody(problems.join('; '), 'invalid_request_error', 'messages'));
      return;
    }
    if (options.contextWindowTokens !== undefined) {
      const promptTokens = estimatePromptTokens(body);
      // As OpenAI does: the prompt plus the output the request asks for must fit.
      const outputTokens = options.promptOnlyWindow ? 0 : requestedOutputTokens(body);
      if (promptTokens + outputTokens > options.contextWindowTokens) {
        sendJson(
          res,
          400,
          errorBody(
            `This model's maximum context length is ${options.contextWindowTokens} tokens. ` +
              `However, you requested ${promptTokens + outputTokens} tokens (${promptTokens} in the messages, ${outputTokens} in the completion). Please reduce the length of the messages or completion.`,
            'invalid_request_error',
            'messages',
            'context_length_exceeded',
          ),
        );
        return;
      }
    }

    const reply = queue.shift() ?? defaultReply?.(body) ?? echoReply(body);
    const send = (): void => {
      if (res.destroyed) return; // the client gave up while we were delaying
      sendReply(res, isRecord(body) ? body : {}, reply, requestNumber);
    };
    if (reply.hang) return; // close() destroys the socket
    if (reply.delayMs !== undefined && reply.delayMs > 0) {
      const timer = setTimeout(() => {
        timers.delete(timer);
        send();
      }, reply.delayMs);
      timers.add(timer);
    } else {
      send();
    }
  }

  function sendReply(
    res: ServerResponse,
    body: Record<string, unknown>,
    reply: FakeReply,
    requestNumber: number,
  ): void {
    for (const [name, value] of Object.entries(reply.headers ?? {})) res.setHeader(name, value);
    if (reply.status !== undefined) {
      sendJson(res, reply.status, reply.errorBody ?? defaultErrorBody(reply.status));
      return;
    }
    if (reply.stallMidBody) {
      const stream = body.stream === true;
      res.writeHead(200, { 'content-type': stream ? 'text/event-stream' : 'application/json' });
      res.write(stream ? 'data: {"id":"x",' : '{"id":"x",'); // then nothing: close() destroys the socket
      return;
    }
    const completion = buildCompletion(body, reply, requestNumber);
    const includeUsage =
      isRecord(body.stream_options) && body.stream_options.include_usage === true;
    if (body.stream === true) streamCompletion(res, completion, reply, includeUsage);
    else sendJson(res, 200, toChatCompletion(completion));
  }

  /** Resolves defaults shared by the streaming and non-streaming forms. */
  function buildCompletion(
    body: Record<string, unknown>,
    reply: FakeReply,
    requestNumber: number,
  ): Completion {
    const toolCalls = (reply.tool_calls ?? []).map((call) => ({
      id: call.id ?? `call_${++toolCallCount}`,
      name: call.name,
      arguments: call.arguments,
    }));
    const content = reply.content ?? '';
    const completionChars =
      content.length + toolCalls.reduce((n, call) => n + call.arguments.length, 0);
    const usage = reply.usage ?? {
      prompt_tokens: estimatePromptTokens(body),
      completion_tokens: Math.ceil(completionChars / 4),
    };
    return {
      id: `chatcmpl-fake-${requestNumber}`,
      created: nowSeconds(),
      model: typeof body.model === 'string' ? body.model : FAKE_MODEL_ID,
      content,
      toolCalls,
      finishReason:
        reply.finish_reason !== undefined
          ? reply.finish_reason
          : toolCalls.length > 0
            ? 'tool_calls'
            : 'stop',
      usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens },
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
    baseURL: `http://127.0.0.1:${port}/v1`,
    requests,
    script(...replies) {
      queue.push(...replies);
    },
    setDefault(fn) {
      defaultReply = fn;
    },
    reset() {
      queue = [];
      requests.length = 0; // keep the array identity: tests may hold a reference
      defaultReply = undefined;
    },
    setEmbeddings(mode) {
      embeddings = mode;
    },
    async close() {
      if (closing) return;
      closing = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      const closed = new Promise<void>((resolve, reject) =>
        server.close((err) => (err ? reject(err) : resolve())),
      );
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  };
}

interface Completion {
  id: string;
  created: number;
  model: string;
  content: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  finishReason: FakeReply['finish_reason'];
  usage: {
    prompt_tokens: number;
    completion_tokens: number;
    total_tokens: number;
    prompt_tokens_details?: { cached_tokens: number };
  };
}

function toChatCompletion(c: Completion): unknown {
  const hasToolCalls = c.toolCalls.length > 0;
  return {
    id: c.id,
    object: 'chat.completion',
    created: c.created,
    model: c.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          // OpenAI sends null content on a pure tool-calling turn.
          content: hasToolCalls && c.content === '' ? null : c.content,
          refusal: null,
          ...(hasToolCalls && {
            tool_calls: c.toolCalls.map((call) => ({
              id: call.id,
              type: 'function',
              function: { name: call.name, arguments: call.arguments },
            })),
          }),
        },
        logprobs: null,
        finish_reason: c.finishReason,
      },
    ],
    usage: c.usage,
  };
}

/**
 * Writes the completion as OpenAI streams it: a role delta, content in
 * several deltas, each tool call as a header delta (index, id, type, name,
 * empty arguments) followed by argument fragments carrying only the index,
 * a finish delta, the optional usage chunk, then `[DONE]`. Stream faults cut
 * this sequence at a fixed point.
 */
function streamCompletion(
  res: ServerResponse,
  c: Completion,
  reply: FakeReply,
  includeUsage: boolean,
): void {
  const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
  const chunk = (delta: unknown, finishReason: FakeReply['finish_reason'] = null): string =>
    event({
      id: c.id,
      object: 'chat.completion.chunk',
      created: c.created,
      model: c.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      // With include_usage, OpenAI sends `usage: null` on every chunk but the last.
      ...(includeUsage && { usage: null }),
    });

  // Every delta event, with the positions the faults cut at (the index of
  // the last event sent before the fault).
  const deltas = [chunk({ role: 'assistant', content: '' })];
  let midContent = 0;
  let midArguments: number | undefined;
  for (const [i, piece] of splitInPieces(c.content).entries()) {
    deltas.push(chunk({ content: piece }));
    if (i === 0) midContent = deltas.length - 1;
  }
  for (const [index, call] of c.toolCalls.entries()) {
    deltas.push(
      chunk({
        tool_calls: [
          { index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } },
        ],
      }),
    );
    for (const fragment of splitInPieces(call.arguments)) {
      deltas.push(chunk({ tool_calls: [{ index, function: { arguments: fragment } }] }));
      midArguments ??= deltas.length - 1;
    }
  }
  const upTo = (last: number): string => deltas.slice(0, last + 1).join('');

  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  if (reply.stallAfterFirstChunk) {
    res.write(upTo(0)); // then nothing: close() destroys the socket
  } else if (reply.streamError) {
    res.end(upTo(midContent) + event(errorBody(SERVER_ERROR_MESSAGE, 'server_error')));
  } else if (reply.resetMidStream) {
    // Destroy only once the partial data has reached the socket, so the
    // client sees a truncated stream rather than no stream at all.
    res.write(upTo(midArguments ?? midContent), () => res.socket?.destroy());
  } else if (reply.noFinish) {
    res.end(deltas.join(''));
  } else {
    const usage = includeUsage
      ? event({
          id: c.id,
          object: 'chat.completion.chunk',
          created: c.created,
          model: c.model,
          choices: [],
          usage: c.usage,
        })
      : '';
    res.end(deltas.join('') + chunk({}, c.finishReason) + usage + 'data: [DONE]\n\n');
  }
}

/** Splits text into up to STREAM_PIECES non-empty pieces of similar length. */
function splitInPieces(text: string): string[] {
  if (text === '') return [];
  const size = Math.ceil(text.length / STREAM_PIECES);
  const pieces: string[] = [];
  for (let start = 0; start < text.length; start += size)
    pieces.push(text.slice(start, start + size));
  return pieces;
}

function echoReply(body: unknown): FakeReply {
  const lastUser = messagesOf(body).findLast((m) => m.role === 'user');
  return { content: `echo: ${contentText(lastUser?.content)}` };
}

/** The text of a message content: a string, or the text parts of a content-part array. */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: unknown) =>
      isRecord(part) && part.type === 'text' && typeof part.text === 'string' ? part.text : '',
    )
    .join('');
}

/** The well-formed messages of a request body (validation may be off, so trust nothing). */
function messagesOf(body: unknown): Record<string, unknown>[] {
  return isRecord(body) && Array.isArray(body.messages)
    ? (body.messages as unknown[]).filter(isRecord)
    : [];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function errorBody(
  message: string,
  type: string,
  param: string | null = null,
  code: string | null = null,
): unknown {
  return { error: { message, type, param, code } };
}

/** The error bodies OpenAI sends for the statuses tests usually script. */
function defaultErrorBody(status: number): unknown {
  if (status === 429)
    return errorBody('Rate limit reached for requests.', 'requests', null, 'rate_limit_exceeded');
  if (status === 401)
    return errorBody(
      'Incorrect API key provided.',
      'invalid_request_error',
      null,
      'invalid_api_key',
    );
  if (status >= 500) return errorBody(SERVER_ERROR_MESSAGE, 'server_error');
  return errorBody(`Fake error with status ${status}.`, 'invalid_request_error');
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

function parseJsonOr(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** A `/v1/embeddings` request as OpenAI documents it (the fields the fake reads). */
interface EmbeddingRequest {
  model: string;
  input: string | string[];
  dimensions?: number;
  encoding_format?: 'float' | 'base64';
}

/** What OpenAI would refuse in an embeddings request, as the fake checks it. */
function embeddingProblems(body: unknown): string[] {
  if (!isRecord(body)) return ['request body must be a JSON object'];
  const problems: string[] = [];
  if (typeof body.model !== 'string' || body.model === '') problems.push('model is required');
  const input = body.input;
  const texts = typeof input === 'string' ? [input] : input;
  if (!Array.isArray(texts) || texts.length === 0)
    problems.push('input must be a string or a non-empty array of strings');
  else if (texts.length > 2048) problems.push('input may hold at most 2048 texts');
  else if (texts.some((text) => typeof text !== 'string' || text === ''))
    problems.push('every input must be a non-empty string');
  if (
    body.dimensions !== undefined &&
    (typeof body.dimensions !== 'number' ||
      !Number.isInteger(body.dimensions) ||
      body.dimensions < 1)
  )
    problems.push('dimensions must be a positive integer');
  if (
    body.encoding_format !== undefined &&
    body.encoding_format !== 'float' &&
    body.encoding_format !== 'base64'
  )
    problems.push("encoding_format must be 'float' or 'base64'");
  return problems;
}

/** OpenAI's answer shape, with the fake's concept vectors. */
function embeddingAnswer(body: EmbeddingRequest): Record<string, unknown> {
  const texts = typeof body.input === 'string' ? [body.input] : body.input;
  const data = texts.map((text, index) => {
    const vector = conceptEmbedding(text, body.model, body.dimensions);
    return {
      object: 'embedding',
      index,
      embedding:
        body.encoding_format === 'base64'
          ? Buffer.from(new Float32Array(vector).buffer).toString('base64')
          : vector,
    };
  });
  const tokens = texts.reduce((sum, text) => sum + Math.ceil(text.length / 4), 0);
  return {
    object: 'list',
    data,
    model: body.model,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  };
}
