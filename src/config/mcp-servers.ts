/**
 * The `mcpServers` section of cairn.json: its JSON Schema, and its resolution
 * into frozen per-server settings with `${VAR}` read from the environment.
 * A missing variable does not fail the settings: it is recorded on the server,
 * which then reports it as its error (one bad server never stops Cairn).
 */
import { isAbsolute, join } from 'node:path';

/** Default limit for connecting to one server (spawn or HTTP handshake included). */
export const DEFAULT_MCP_CONNECT_TIMEOUT_MS = 10_000;
/** Default limit for one tool call. */
export const DEFAULT_MCP_CALL_TIMEOUT_MS = 60_000;

const SERVER_NAME_PATTERN = '^[a-zA-Z0-9_-]{1,64}$';
const stringMap = { type: 'object', additionalProperties: { type: 'string' } } as const;
const commonProperties = {
  timeoutMs: { type: 'integer', minimum: 1 },
  connectTimeoutMs: { type: 'integer', minimum: 1 },
} as const;

/** JSON Schema of cairn.json's `mcpServers`. */
export const MCP_SERVERS_SCHEMA = {
  type: 'object',
  propertyNames: { pattern: SERVER_NAME_PATTERN },
  additionalProperties: {
    oneOf: [
      {
        type: 'object',
        additionalProperties: false,
        required: ['command'],
        properties: {
          command: { type: 'string', minLength: 1 },
          args: { type: 'array', items: { type: 'string' } },
          env: stringMap,
          cwd: { type: 'string', minLength: 1 },
          ...commonProperties,
        },
      },
      {
        type: 'object',
        additionalProperties: false,
        required: ['url'],
        properties: {
          url: { type: 'string', pattern: '^https?://' },
          headers: stringMap,
          ...commonProperties,
        },
      },
    ],
  },
} as const;

export interface McpServerFile {
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  url?: string;
  headers?: Record<string, string>;
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

interface McpServerCommon {
  readonly name: string;
  /** Per tool call. */
  readonly timeoutMs: number;
  readonly connectTimeoutMs: number;
  /** `${VAR}` references whose variable is unset: the server cannot start. */
  readonly missingEnv: readonly string[];
  /**
   * The values that came from the environment, so any text shown to people
   * (logs, /health, tool errors) can be scrubbed of them. Never logged.
   */
  readonly secrets: readonly string[];
}

export interface McpStdioServerSettings extends McpServerCommon {
  readonly transport: 'stdio';
  readonly command: string;
  readonly args: readonly string[];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
}

export interface McpHttpServerSettings extends McpServerCommon {
  readonly transport: 'http';
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
}

export type McpServerSettings = McpStdioServerSettings | McpHttpServerSettings;

type Env = Readonly<Record<string, string | undefined>>;

/** Replaces each `${VAR}` with the variable's value, noting the values used and the ones missing. */
function expandMap(
  map: Readonly<Record<string, string>>,
  env: Env,
  secrets: string[],
  missing: Set<string>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, template] of Object.entries(map)) {
    out[key] = template.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, name: string) => {
      const value = env[name];
      if (value === undefined || value === '') {
        missing.add(name);
        return '';
      }
      secrets.push(value);
      return value;
    });
  }
  return out;
}

/** Resolves every server of cairn.json's `mcpServers`; `home` anchors relative `cwd`s. */
export function resolveMcpServers(
  file: Readonly<Record<string, McpServerFile>> | undefined,
  env: Env,
  home: string,
): Readonly<Record<string, McpServerSettings>> {
  const servers: Record<string, McpServerSettings> = {};
  for (const [name, entry] of Object.entries(file ?? {})) {
    const secrets: string[] = [];
    const missing = new Set<string>();
    const common = {
      name,
      timeoutMs: entry.timeoutMs ?? DEFAULT_MCP_CALL_TIMEOUT_MS,
      connectTimeoutMs: entry.connectTimeoutMs ?? DEFAULT_MCP_CONNECT_TIMEOUT_MS,
    };
    const resolved: McpServerSettings =
      entry.command !== undefined
        ? {
            ...common,
            transport: 'stdio',
            command: entry.command,
            args: Object.freeze([...(entry.args ?? [])]),
            env: Object.freeze(expandMap(entry.env ?? {}, env, secrets, missing)),
            cwd:
              entry.cwd === undefined
                ? home
                : isAbsolute(entry.cwd)
                  ? entry.cwd
                  : join(home, entry.cwd),
            missingEnv: [],
            secrets: [],
          }
        : {
            ...common,
            transport: 'http',
            url: entry.url ?? '',
            headers: Object.freeze(expandMap(entry.headers ?? {}, env, secrets, missing)),
            missingEnv: [],
            secrets: [],
          };
    servers[name] = Object.freeze({
      ...resolved,
      missingEnv: Object.freeze([...missing]),
      // Short values ("1", "yes") would scrub ordinary words; they are not secrets.
      secrets: Object.freeze(secrets.filter((s) => s.length >= 4)),
    });
  }
  return Object.freeze(servers);
}
