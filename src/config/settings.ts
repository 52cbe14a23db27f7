/**
 * Settings: `cairn.json` (optional) + environment variables → one frozen,
 * validated `Settings` object. Reads files and the given env only; never
 * mutates `process.env`, never reaches the network.
 */
import { existsSync, readFileSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { CairnError } from '../errors.js';
import { parseJsonSource, type JsonSource } from './json-source.js';
import { didYouMean } from './nearest-name.js';
import {
  MCP_SERVERS_SCHEMA,
  resolveMcpServers,
  type McpServerFile,
  type McpServerSettings,
} from './mcp-servers.js';

export const DEFAULT_PORT = 5050;
export const DEFAULT_HOST = '127.0.0.1';
export const DEFAULT_BODY_LIMIT_BYTES = 1_048_576;
/** The largest session import one request may send (32 MiB). */
export const DEFAULT_IMPORT_MAX_BYTES = 32 * 1024 * 1024;
/** What one client key may import in a UTC day, all requests together, per instance (256 MiB). */
export const DEFAULT_IMPORT_DAY_BYTES = 256 * 1024 * 1024;
/** A request must arrive in full within this (slow-loris clients are cut). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
export const DEFAULT_MAX_STREAMS = 200;
export const DEFAULT_STREAM_BUFFER_BYTES = 1_048_576;
/**
 * SQLite's page cache in MB (`database.cacheMb`): better-sqlite3's own
 * default, made explicit so a server's memory can be sized.
 */
export const DEFAULT_SQLITE_CACHE_MB = 16;
/** Postgres connections one instance opens at most (`database.poolSize`). */
export const DEFAULT_POOL_SIZE = 10;
export const DEFAULT_CONTEXT_WINDOW_TOKENS = 32_768;
export const DEFAULT_MODEL_TIMEOUT_MS = 120_000;
export const DEFAULT_MODEL_MAX_RETRIES = 3;
export const DEFAULT_OPENAI_BASE_URL = 'https://api.openai.com/v1';
export const DEFAULT_OPENAI_MODEL = 'gpt-4o-mini';
export const DEFAULT_ANTHROPIC_BASE_URL = 'https://api.anthropic.com';
export const DEFAULT_ANTHROPIC_MODEL = 'claude-sonnet-4-5';
/** Anthropic requires max_tokens on every call; this is sent when nothing sets one. */
export const DEFAULT_MAX_OUTPUT_TOKENS = 4096;

/**
 * The output tokens a call of `role` asks for when the request sets none:
 * `maxOutputTokens`, else (Anthropic, which needs one) DEFAULT_MAX_OUTPUT_TOKENS
 * but never more than a quarter of the window, so the prompt keeps room; an
 * OpenAI-compatible call sends none (0).
 */
export function defaultOutputTokens(
  role: Pick<ModelRoleSettings, 'provider' | 'maxOutputTokens' | 'contextWindow'>,
): number {
  if (role.provider !== 'anthropic') return 0;
  return (
    role.maxOutputTokens ?? Math.min(DEFAULT_MAX_OUTPUT_TOKENS, Math.floor(role.contextWindow / 4))
  );
}
export const OFFLINE_MODEL_NAME = 'offline';

/** The providers a role can name in cairn.json (`offline` is chosen, never named). */
export const MODEL_PROVIDERS = ['openai', 'anthropic'] as const;

export interface ModelRoleSettings {
  /**
   * `offline` is the built-in deterministic model; `openai` any
   * OpenAI-compatible endpoint; `anthropic` the Anthropic Messages API.
   */
  readonly provider: 'openai' | 'anthropic' | 'offline';
  readonly baseURL: string | null;
  readonly model: string;
  /** Name of the environment variable that holds the key (the key itself is in `apiKey`). */
  readonly apiKeyEnv: string;
  /** Resolved from the environment. Never logged, never returned by the API. */
  readonly apiKey: string | null;
  readonly contextWindow: number;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  /**
   * Wire quirks of the provider: `mistral` requires an assistant message
   * between tool results and the next user message (bridged on the wire only).
   */
  readonly profile: 'openai' | 'mistral';
  /** What the role's model costs, in currency units per million tokens; null: calls are unpriced. */
  readonly pricing?: ModelPricing | null;
  /** The reply's token limit when the call sets none (Anthropic requires one). */
  readonly maxOutputTokens?: number;
  /** Models tried in order after this one fails for good on a retryable cause. */
  readonly fallbacks?: readonly ModelRoleSettings[];
}

export interface ModelPricing {
  readonly inputPerMTok: number;
  readonly outputPerMTok: number;
  /** Prompt tokens served from the provider's cache (default: inputPerMTok). */
  readonly cachedInputPerMTok: number;
}

export const DEFAULT_RECORDS_KEEP_DAYS = 30;

/** The providers the `embed` role can name. */
export const EMBED_PROVIDERS = ['openai', 'local'] as const;
/** OpenAI's embedding model when `models.embed` names none. */
export const DEFAULT_OPENAI_EMBED_MODEL = 'text-embedding-3-small';
/** The one model `provider: "local"` runs (Universal Sentence Encoder lite, shipped in an npm package). */
export const LOCAL_EMBED_MODEL = 'universal-sentence-encoder-lite';
/**
 * An embedding call waits at most this long by default: the query of a turn
 * is embedded on the way to the model, so a slow provider must give up
 * quickly (recall then falls back to lexical search).
 */
export const DEFAULT_EMBED_TIMEOUT_MS = 2_000;

/**
 * The `embed` model role (hybrid recall). It exists only when cairn.json
 * configures it: it never inherits from `main`, since a chat endpoint is not
 * an embeddings endpoint and embedding every message costs money.
 */
export interface EmbedRoleSettings {
  /** `openai`: any `/v1/embeddings` endpoint; `local`: the bundled sentence encoder, in a worker thread. */
  readonly provider: (typeof EMBED_PROVIDERS)[number];
  /** Null for `local`. */
  readonly baseURL: string | null;
  readonly model: string;
  readonly apiKeyEnv: string;
  /** Resolved from the environment. Never logged, never returned by the API. */
  readonly apiKey: string | null;
  /** Asked of the provider (OpenAI's `dimensions`); null: the model's own. */
  readonly dimensions: number | null;
  readonly timeoutMs: number;
  readonly pricing: ModelPricing | null;
}

/** Where traces go over OTLP/HTTP; null when tracing is off. */
export interface OtlpSettings {
  /** The traces URL (`…/v1/traces`). */
  readonly tracesUrl: string;
  readonly protocol: 'http/protobuf' | 'http/json';
  readonly headers: Readonly<Record<string, string>>;
  readonly serviceName: string;
  /** Message content on spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true). */
  readonly captureContent: boolean;
}

export interface Settings {
  readonly home: string;
  readonly agentsDir: string;
  readonly server: {
    readonly host: string;
    readonly port: number;
    readonly apiKey: string | null;
    readonly bodyLimitBytes: number;
    /** Requests allowed per client per window; null = no limit. */
    readonly rateLimit: { readonly max: number; readonly windowMs: number } | null;
    /** Event streams (`/events` and streamed chats) open at once; beyond, 503. */
    readonly maxStreams: number;
    /** Bytes one stream may queue for a client that does not read before it is dropped. */
    readonly streamBufferBytes: number;
    /** The URL browsers and clients reach this server by (behind a proxy), or null. */
    readonly publicUrl: string | null;
    /** Host names the server answers to besides loopback, the bind address and publicUrl's host. */
    readonly allowedHosts: readonly string[];
    /** Web origins whose pages may call the API (CORS); none by default. */
    readonly corsOrigins: readonly string[];
    /**
     * Read the client's address from `X-Forwarded-For` (behind a reverse
     * proxy): true trusts every hop, a list only those proxy addresses or
     * CIDR ranges; false (the default) uses the socket's address.
     */
    readonly trustProxy: boolean | readonly string[];
    /** A request must arrive in full (headers and body) within this; slower ones are cut with 408. */
    readonly requestTimeoutMs: number;
    /** Bytes one session import (POST /sessions/import) may send; more is 413. */
    readonly importMaxBytes: number;
    /** Bytes one client key may import per UTC day on this instance; more is 429 KEY_LIMIT. */
    readonly importDayBytes: number;
  };
  readonly database: {
    readonly kind: 'sqlite' | 'postgres';
    readonly path: string;
    readonly url: string | null;
    /** Postgres connections this instance opens at most (`database.poolSize`, default 10). */
    readonly poolSize: number;
    /** SQLite's page cache in MB (`database.cacheMb`, default 16); it fills as the database is used. */
    readonly cacheMb: number;
  };
  readonly models: {
    readonly main: ModelRoleSettings;
    readonly compact: ModelRoleSettings;
    /** Session titles; falls back to `compact` field by field. */
    readonly title: ModelRoleSettings;
    /** Message embeddings for hybrid recall; null unless cairn.json configures `models.embed`. */
    readonly embed: EmbedRoleSettings | null;
  };
  /** MCP tool servers by name; empty when cairn.json has none. */
  readonly mcpServers: Readonly<Record<string, McpServerSettings>>;
  /** Model-call records: on by default, pruned after `keepDays`. */
  readonly records: { readonly enabled: boolean; readonly keepDays: number };
  readonly telemetry: { readonly otlp: OtlpSettings | null };
}

type Env = Readonly<Record<string, string | undefined>>;

const modelEndpointProperties = {
  provider: { type: 'string', enum: MODEL_PROVIDERS },
  baseURL: { type: 'string', minLength: 1 },
  model: { type: 'string', minLength: 1 },
  apiKeyEnv: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
  contextWindow: { type: 'integer', minimum: 512 },
  timeoutMs: { type: 'integer', minimum: 1 },
  maxRetries: { type: 'integer', minimum: 0, maximum: 10 },
  profile: { type: 'string', enum: ['openai', 'mistral'] },
  maxOutputTokens: { type: 'integer', minimum: 1 },
} as const;

/** An object with these properties and no others: a misspelt key in cairn.json is an error, never ignored. */
function closedObject<const P extends Record<string, unknown>>(properties: P) {
  return { type: 'object', additionalProperties: false, properties } as const;
}

const modelRoleSchema = closedObject({
  ...modelEndpointProperties,
  pricing: {
    ...closedObject({
      inputPerMTok: { type: 'number', minimum: 0 },
      outputPerMTok: { type: 'number', minimum: 0 },
      cachedInputPerMTok: { type: 'number', minimum: 0 },
    }),
    required: ['inputPerMTok', 'outputPerMTok'],
  },
  fallbacks: { type: 'array', maxItems: 5, items: closedObject(modelEndpointProperties) },
});

const embedRoleSchema = closedObject({
  provider: { type: 'string', enum: EMBED_PROVIDERS },
  baseURL: { type: 'string', minLength: 1 },
  model: { type: 'string', minLength: 1 },
  apiKeyEnv: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
  dimensions: { type: 'integer', minimum: 1, maximum: 8192 },
  timeoutMs: { type: 'integer', minimum: 1 },
  pricing: {
    ...closedObject({ inputPerMTok: { type: 'number', minimum: 0 } }),
    required: ['inputPerMTok'],
  },
});

/** JSON Schema of cairn.json. */
export const CAIRN_JSON_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  properties: {
    $schema: { type: 'string' },
    server: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string', minLength: 1 },
        port: { type: 'integer', minimum: 0, maximum: 65535 },
        apiKey: { type: ['string', 'null'] },
        bodyLimitBytes: { type: 'integer', minimum: 1024 },
        importMaxBytes: { type: 'integer', minimum: 1024 },
        importDayBytes: { type: 'integer', minimum: 1024 },
        rateLimit: {
          type: ['object', 'null'],
          additionalProperties: false,
          required: ['max', 'windowMs'],
          properties: {
            max: { type: 'integer', minimum: 1 },
            windowMs: { type: 'integer', minimum: 1000 },
          },
        },
        maxStreams: { type: 'integer', minimum: 1 },
        streamBufferBytes: { type: 'integer', minimum: 1024 },
        publicUrl: { type: ['string', 'null'], pattern: '^https?://[^/?#]+(/[^?#]*)?$' },
        allowedHosts: {
          type: 'array',
          items: { type: 'string', pattern: '^\\.?[A-Za-z0-9.:\\[\\]-]+$' },
        },
        corsOrigins: {
          type: 'array',
          items: { type: 'string', pattern: '^https?://[^/?#*]+$' },
        },
        trustProxy: {
          anyOf: [{ type: 'boolean' }, { type: 'array', items: { type: 'string', minLength: 1 } }],
        },
        requestTimeoutMs: { type: 'integer', minimum: 100 },
      },
    },
    database: closedObject({
      path: { type: 'string', minLength: 1 },
      url: { type: ['string', 'null'] },
      poolSize: { type: 'integer', minimum: 1, maximum: 1000 },
      cacheMb: { type: 'integer', minimum: 1, maximum: 4096 },
    }),
    models: closedObject({
      main: modelRoleSchema,
      compact: modelRoleSchema,
      title: modelRoleSchema,
      embed: embedRoleSchema,
    }),
    mcpServers: MCP_SERVERS_SCHEMA,
    records: closedObject({
      enabled: { type: 'boolean' },
      keepDays: { type: 'number', minimum: 1 },
    }),
    telemetry: {
      type: 'object',
      additionalProperties: false,
      properties: {
        otlp: {
          type: ['object', 'null'],
          additionalProperties: false,
          required: ['endpoint'],
          properties: {
            endpoint: { type: 'string', pattern: '^https?://' },
            protocol: { type: 'string', enum: ['http/protobuf', 'http/json'] },
            headers: { type: 'object', additionalProperties: { type: 'string' } },
          },
        },
      },
    },
  },
} as const;

interface ModelEndpointFile {
  provider?: (typeof MODEL_PROVIDERS)[number];
  baseURL?: string;
  model?: string;
  apiKeyEnv?: string;
  contextWindow?: number;
  timeoutMs?: number;
  maxRetries?: number;
  profile?: 'openai' | 'mistral';
  pricing?: { inputPerMTok: number; outputPerMTok: number; cachedInputPerMTok?: number };
  maxOutputTokens?: number;
}

interface ModelRoleFile extends ModelEndpointFile {
  fallbacks?: ModelEndpointFile[];
}

interface EmbedRoleFile {
  provider?: (typeof EMBED_PROVIDERS)[number];
  baseURL?: string;
  model?: string;
  apiKeyEnv?: string;
  dimensions?: number;
  timeoutMs?: number;
  pricing?: { inputPerMTok: number };
}

interface OtlpFile {
  endpoint: string;
  protocol?: 'http/protobuf' | 'http/json';
  headers?: Record<string, string>;
}

interface CairnJson {
  server?: {
    host?: string;
    port?: number;
    apiKey?: string | null;
    bodyLimitBytes?: number;
    importMaxBytes?: number;
    importDayBytes?: number;
    rateLimit?: { max: number; windowMs: number } | null;
    maxStreams?: number;
    streamBufferBytes?: number;
    publicUrl?: string | null;
    allowedHosts?: string[];
    corsOrigins?: string[];
    trustProxy?: boolean | string[];
    requestTimeoutMs?: number;
  };
  database?: { path?: string; url?: string | null; poolSize?: number; cacheMb?: number };
  models?: {
    main?: ModelRoleFile;
    compact?: ModelRoleFile;
    title?: ModelRoleFile;
    embed?: EmbedRoleFile;
  };
  mcpServers?: Record<string, McpServerFile>;
  records?: { enabled?: boolean; keepDays?: number };
  telemetry?: { otlp?: OtlpFile | null };
}

// verbose: each error carries its parent schema, whose properties name what a misspelt key meant.
const validateCairnJson = new Ajv({
  allErrors: true,
  strict: true,
  verbose: true,
}).compile<CairnJson>(CAIRN_JSON_SCHEMA);

/** `cairn.json:3:5: /server unknown property "prot"; did you mean "port"?` */
function describeAjvError(file: string, source: JsonSource, e: ErrorObject): string {
  if (e.keyword === 'additionalProperties') {
    const key = String((e.params as { additionalProperty: string }).additionalProperty);
    const parent = e.parentSchema as { properties?: Record<string, unknown> } | undefined;
    const known = Object.keys(parent?.properties ?? {}).filter((k) => k !== '$schema');
    const { line, column } = source.positionOf(e.instancePath, key);
    return `${file}:${line}:${column}: ${e.instancePath || '/'} has an unknown property "${key}"${didYouMean(key, known)}`;
  }
  const { line, column } = source.positionOf(e.instancePath);
  return `${file}:${line}:${column}: ${e.instancePath || '/'} ${e.message ?? 'is invalid'}`;
}

function readCairnJson(home: string): CairnJson {
  const file = join(home, 'cairn.json');
  if (!existsSync(file)) return {};
  const parsed = parseJsonSource(readFileSync(file, 'utf8'));
  if ('error' in parsed) {
    const { line, column } = parsed.position;
    throw new CairnError(
      'VALIDATION_ERROR',
      `${file}:${line}:${column}: not valid JSON: ${parsed.error}`,
    );
  }
  const { value, source } = parsed;
  if (!validateCairnJson(value)) {
    // Every problem of the file at once, top to bottom.
    const problems = (validateCairnJson.errors ?? [])
      .map((e) => ({ e, at: source.positionOf(e.instancePath, additionalKey(e)) }))
      .sort((a, b) => a.at.line - b.at.line || a.at.column - b.at.column)
      .map(({ e }) => describeAjvError(file, source, e));
    throw new CairnError('VALIDATION_ERROR', `Invalid settings:\n  ${problems.join('\n  ')}`);
  }
  return value;
}

function additionalKey(e: ErrorObject): string | undefined {
  return e.keyword === 'additionalProperties'
    ? String((e.params as { additionalProperty: string }).additionalProperty)
    : undefined;
}

function parsePort(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `CAIRN_PORT must be an integer 0–65535, got "${value}".`,
    );
  }
  return port;
}

/** `server.publicUrl` (or CAIRN_PUBLIC_URL) must be an http(s) URL: its host is allowed, its origin is the console's. */
function checkPublicUrl(value: string | null): string | null {
  if (value === null) return null;
  let url: URL | undefined;
  try {
    url = new URL(value);
  } catch {
    url = undefined;
  }
  if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:'))
    throw new CairnError(
      'VALIDATION_ERROR',
      `server.publicUrl must be an http(s) URL such as https://cairn.example.com, got "${value}".`,
    );
  return value;
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

/** What a provider uses when a role does not say. */
const PROVIDER_DEFAULTS = {
  openai: {
    baseURL: DEFAULT_OPENAI_BASE_URL,
    model: DEFAULT_OPENAI_MODEL,
    apiKeyEnv: 'OPENAI_API_KEY',
  },
  anthropic: {
    baseURL: DEFAULT_ANTHROPIC_BASE_URL,
    model: DEFAULT_ANTHROPIC_MODEL,
    apiKeyEnv: 'ANTHROPIC_API_KEY',
  },
} as const;

/**
 * Resolves one model role. `fallback` is the role it inherits from (`main`
 * for compact, `compact` for title): every field the role does not set is
 * taken from it. Connection fields (baseURL, model, key) are inherited only
 * while the provider stays the same: another provider starts from its own defaults.
 */
function resolveRole(
  file: ModelRoleFile,
  env: Env,
  fallback: ModelRoleSettings | undefined,
  envOverrides: { baseURL?: string; model?: string },
): ModelRoleSettings {
  const endpoint = resolveEndpoint(file, env, fallback, envOverrides);
  const fallbacks =
    file.fallbacks !== undefined
      ? file.fallbacks.map((entry) => resolveEndpoint(entry, env, endpoint, {}))
      : (fallback?.fallbacks ?? []);
  return Object.freeze({ ...endpoint, fallbacks: Object.freeze(fallbacks) });
}

function resolveEndpoint(
  file: ModelEndpointFile,
  env: Env,
  fallback: ModelRoleSettings | undefined,
  envOverrides: { baseURL?: string; model?: string },
): ModelRoleSettings {
  const named = file.provider ?? (fallback?.provider === 'anthropic' ? 'anthropic' : undefined);
  const sameProvider = fallback !== undefined && fallback.provider === (named ?? 'openai');
  const inherited = named === undefined || sameProvider ? fallback : undefined;
  const envBaseURL = named === 'anthropic' ? undefined : envOverrides.baseURL;
  const baseURL = envBaseURL ?? file.baseURL ?? inherited?.baseURL ?? null;
  const defaults = PROVIDER_DEFAULTS[named ?? 'openai'];
  const apiKeyEnv = file.apiKeyEnv ?? inherited?.apiKeyEnv ?? defaults.apiKeyEnv;
  const apiKey = nonEmpty(env[apiKeyEnv]) ?? null;
  const explicitModel = (named === 'anthropic' ? undefined : envOverrides.model) ?? file.model;
  // A role is online when it names a provider, has an endpoint, or a key for OpenAI's default one.
  const online =
    named !== undefined || baseURL !== null || apiKey !== null || fallback?.provider === 'openai';
  const provider = online ? (named ?? 'openai') : 'offline';
  const model =
    explicitModel ??
    (inherited !== undefined && inherited.provider === provider ? inherited.model : undefined) ??
    (provider === 'offline' ? OFFLINE_MODEL_NAME : PROVIDER_DEFAULTS[provider].model);
  const maxOutputTokens = file.maxOutputTokens ?? fallback?.maxOutputTokens;
  return Object.freeze({
    provider,
    baseURL: provider === 'offline' ? null : (baseURL ?? PROVIDER_DEFAULTS[provider].baseURL),
    model: provider === 'offline' ? OFFLINE_MODEL_NAME : model,
    apiKeyEnv,
    apiKey: provider === 'offline' ? null : apiKey,
    contextWindow: file.contextWindow ?? fallback?.contextWindow ?? DEFAULT_CONTEXT_WINDOW_TOKENS,
    timeoutMs: file.timeoutMs ?? fallback?.timeoutMs ?? DEFAULT_MODEL_TIMEOUT_MS,
    maxRetries: file.maxRetries ?? fallback?.maxRetries ?? DEFAULT_MODEL_MAX_RETRIES,
    profile: file.profile ?? fallback?.profile ?? 'openai',
    pricing: file.pricing
      ? Object.freeze({
          inputPerMTok: file.pricing.inputPerMTok,
          outputPerMTok: file.pricing.outputPerMTok,
          cachedInputPerMTok: file.pricing.cachedInputPerMTok ?? file.pricing.inputPerMTok,
        })
      : (fallback?.pricing ?? null),
    ...(maxOutputTokens !== undefined ? { maxOutputTokens } : {}),
  });
}

/**
 * The `embed` role as configured, or null when cairn.json has no
 * `models.embed`. `local` has one model and no endpoint or key: naming
 * either is a mistake worth reporting.
 */
function resolveEmbedRole(file: EmbedRoleFile | undefined, env: Env): EmbedRoleSettings | null {
  if (file === undefined) return null;
  const provider = file.provider ?? 'openai';
  const pricing = file.pricing
    ? Object.freeze({
        inputPerMTok: file.pricing.inputPerMTok,
        outputPerMTok: 0,
        cachedInputPerMTok: file.pricing.inputPerMTok,
      })
    : null;
  const timeoutMs = file.timeoutMs ?? DEFAULT_EMBED_TIMEOUT_MS;
  if (provider === 'local') {
    const stray = (['baseURL', 'apiKeyEnv'] as const).filter((key) => file[key] !== undefined);
    if (file.model !== undefined && file.model !== LOCAL_EMBED_MODEL) stray.push('model' as never);
    if (stray.length > 0)
      throw new CairnError(
        'VALIDATION_ERROR',
        `models.embed: provider "local" runs the bundled ${LOCAL_EMBED_MODEL} and takes no ${stray.join(', ')}.`,
      );
    if (file.dimensions !== undefined && file.dimensions !== 512)
      throw new CairnError(
        'VALIDATION_ERROR',
        `models.embed.dimensions: ${LOCAL_EMBED_MODEL} makes 512-dimension vectors, not ${file.dimensions}.`,
      );
    return Object.freeze({
      provider,
      baseURL: null,
      model: LOCAL_EMBED_MODEL,
      apiKeyEnv: '',
      apiKey: null,
      dimensions: 512,
      timeoutMs,
      pricing,
    });
  }
  const apiKeyEnv = file.apiKeyEnv ?? 'OPENAI_API_KEY';
  return Object.freeze({
    provider,
    baseURL: file.baseURL ?? DEFAULT_OPENAI_BASE_URL,
    model: file.model ?? DEFAULT_OPENAI_EMBED_MODEL,
    apiKeyEnv,
    apiKey: nonEmpty(env[apiKeyEnv]) ?? null,
    dimensions: file.dimensions ?? null,
    timeoutMs,
    pricing,
  });
}

/** `OTEL_EXPORTER_OTLP_HEADERS`: `key=value,key2=value2`, values URL-encoded. */
function parseOtlpHeaders(text: string | undefined): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const pair of (text ?? '').split(',')) {
    const at = pair.indexOf('=');
    if (at <= 0) continue;
    headers[pair.slice(0, at).trim()] = decodeURIComponent(pair.slice(at + 1).trim());
  }
  return headers;
}

/**
 * Tracing is on when the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT or
 * cairn.json's telemetry.otlp names a collector; the variables win, as the
 * OpenTelemetry specification says. A base endpoint gets `/v1/traces`
 * appended; the traces-specific one is used as is.
 */
function resolveOtlp(file: OtlpFile | null | undefined, env: Env): OtlpSettings | null {
  const tracesEndpoint = nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
  const baseEndpoint = nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT) ?? file?.endpoint;
  if (tracesEndpoint === undefined && baseEndpoint === undefined) return null;
  if (nonEmpty(env.OTEL_TRACES_EXPORTER) === 'none' || env.OTEL_SDK_DISABLED === 'true')
    return null;
  const tracesUrl = tracesEndpoint ?? `${baseEndpoint!.replace(/\/+$/, '')}/v1/traces`;
  const protocolText =
    nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL) ??
    nonEmpty(env.OTEL_EXPORTER_OTLP_PROTOCOL) ??
    file?.protocol ??
    'http/protobuf';
  if (protocolText !== 'http/protobuf' && protocolText !== 'http/json') {
    throw new CairnError(
      'VALIDATION_ERROR',
      `OTEL_EXPORTER_OTLP_PROTOCOL is "${protocolText}"; Cairn exports over OTLP/HTTP: use http/protobuf or http/json.`,
    );
  }
  return Object.freeze({
    tracesUrl,
    protocol: protocolText,
    headers: Object.freeze({
      ...(file?.headers ?? {}),
      ...parseOtlpHeaders(env.OTEL_EXPORTER_OTLP_HEADERS),
      ...parseOtlpHeaders(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS),
    }),
    serviceName: nonEmpty(env.OTEL_SERVICE_NAME) ?? 'cairn',
    captureContent:
      (env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT ?? '').toLowerCase() === 'true',
  });
}

/**
 * Loads and validates settings. `home` defaults to `CAIRN_HOME` or the
 * working directory; environment variables override cairn.json.
 */
export function loadSettings(options: { home?: string; env?: Env } = {}): Settings {
  const env = options.env ?? process.env;
  const home = resolve(options.home ?? nonEmpty(env.CAIRN_HOME) ?? process.cwd());
  const file = readCairnJson(home);

  const main = resolveRole(file.models?.main ?? {}, env, undefined, {
    baseURL: nonEmpty(env.OPENAI_BASE_URL),
    model: nonEmpty(env.CAIRN_MODEL),
  });
  const compactFile = file.models?.compact ?? {};
  const compact =
    Object.keys(compactFile).length === 0 ? main : resolveRole(compactFile, env, main, {});
  const titleFile = file.models?.title ?? {};
  const title =
    Object.keys(titleFile).length === 0 ? compact : resolveRole(titleFile, env, compact, {});

  const dbPath = nonEmpty(env.CAIRN_DB) ?? file.database?.path ?? join('data', 'cairn.db');
  const databaseUrl = nonEmpty(env.DATABASE_URL) ?? file.database?.url ?? null;

  return Object.freeze({
    home,
    agentsDir: join(home, 'agents'),
    server: Object.freeze({
      host: nonEmpty(env.CAIRN_HOST) ?? file.server?.host ?? DEFAULT_HOST,
      port:
        env.CAIRN_PORT !== undefined && env.CAIRN_PORT !== ''
          ? parsePort(env.CAIRN_PORT)
          : (file.server?.port ?? DEFAULT_PORT),
      // An empty or blank key is no key: it must not disable auth or the
      // refusal to bind a public address without one.
      apiKey: nonEmpty(env.CAIRN_API_KEY) ?? nonEmpty(file.server?.apiKey ?? undefined) ?? null,
      bodyLimitBytes: file.server?.bodyLimitBytes ?? DEFAULT_BODY_LIMIT_BYTES,
      rateLimit: file.server?.rateLimit ? Object.freeze({ ...file.server.rateLimit }) : null,
      maxStreams: file.server?.maxStreams ?? DEFAULT_MAX_STREAMS,
      streamBufferBytes: file.server?.streamBufferBytes ?? DEFAULT_STREAM_BUFFER_BYTES,
      publicUrl: checkPublicUrl(nonEmpty(env.CAIRN_PUBLIC_URL) ?? file.server?.publicUrl ?? null),
      allowedHosts: Object.freeze([...(file.server?.allowedHosts ?? [])]),
      corsOrigins: Object.freeze([...(file.server?.corsOrigins ?? [])]),
      trustProxy: Array.isArray(file.server?.trustProxy)
        ? Object.freeze([...file.server.trustProxy])
        : (file.server?.trustProxy ?? false),
      requestTimeoutMs: file.server?.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
      importMaxBytes: file.server?.importMaxBytes ?? DEFAULT_IMPORT_MAX_BYTES,
      importDayBytes: file.server?.importDayBytes ?? DEFAULT_IMPORT_DAY_BYTES,
    }),
    database: Object.freeze({
      kind: databaseUrl === null ? 'sqlite' : 'postgres',
      path: dbPath === ':memory:' || isAbsolute(dbPath) ? dbPath : join(home, dbPath),
      url: databaseUrl,
      poolSize: file.database?.poolSize ?? DEFAULT_POOL_SIZE,
      cacheMb: file.database?.cacheMb ?? DEFAULT_SQLITE_CACHE_MB,
    }),
    models: Object.freeze({
      main,
      compact,
      title,
      embed: resolveEmbedRole(file.models?.embed, env),
    }),
    mcpServers: resolveMcpServers(file.mcpServers, env, home),
    records: Object.freeze({
      enabled: file.records?.enabled ?? true,
      keepDays: file.records?.keepDays ?? DEFAULT_RECORDS_KEEP_DAYS,
    }),
    telemetry: Object.freeze({ otlp: resolveOtlp(file.telemetry?.otlp, env) }),
  });
}

/** A loopback host needs no API key; anything else does: no open server on a network. */
export function isLoopbackHost(host: string): boolean {
  return (
    host === 'localhost' || host === '::1' || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host)
  );
}

/** A one-line description of a role for the startup log: never contains the key. */
export function describeModelRole(role: ModelRoleSettings): string {
  if (role.provider === 'offline') return 'offline (built-in deterministic model, no network)';
  const fallbacks = (role.fallbacks ?? []).map((f) => `${f.model} (${f.provider})`);
  return (
    `${role.model} (${role.provider}) at ${role.baseURL ?? DEFAULT_OPENAI_BASE_URL} (context ${role.contextWindow} tokens)` +
    (fallbacks.length > 0 ? `, falling back to ${fallbacks.join(', ')}` : '')
  );
}
