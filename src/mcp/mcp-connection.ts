/**
 * One configured MCP server: connects through the SDK (stdio, or Streamable
 * HTTP falling back to the older SSE transport), keeps the server's tool list
 * current (`tools/list_changed`), reconnects with capped, jittered backoff when
 * the connection fails or drops, and stops the child process on `close`.
 * Every message it exposes is scrubbed of the values read from `${VAR}`.
 */
import type { Readable } from 'node:stream';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { McpServerSettings } from '../config/mcp-servers.js';
import { describeError } from '../errors.js';
import { VERSION } from '../version.js';
import type { McpCallResult } from './format-result.js';

/** The MCP client SDK, loaded on the first connection. */
interface ClientSdk {
  Client: typeof import('@modelcontextprotocol/sdk/client/index.js').Client;
  SSEClientTransport: typeof import('@modelcontextprotocol/sdk/client/sse.js').SSEClientTransport;
  StdioClientTransport: typeof import('@modelcontextprotocol/sdk/client/stdio.js').StdioClientTransport;
  StreamableHTTPClientTransport: typeof import('@modelcontextprotocol/sdk/client/streamableHttp.js').StreamableHTTPClientTransport;
}
let clientSdk: Promise<ClientSdk> | undefined;

/**
 * The SDK (and zod under it, ~20 MB resident) loads when a server first
 * connects, not at start-up: most servers configure no mcpServers.
 */
function loadClientSdk(): Promise<ClientSdk> {
  clientSdk ??= Promise.all([
    import('@modelcontextprotocol/sdk/client/index.js'),
    import('@modelcontextprotocol/sdk/client/sse.js'),
    import('@modelcontextprotocol/sdk/client/stdio.js'),
    import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
  ]).then(([index, sse, stdio, streamable]) => ({
    Client: index.Client,
    SSEClientTransport: sse.SSEClientTransport,
    StdioClientTransport: stdio.StdioClientTransport,
    StreamableHTTPClientTransport: streamable.StreamableHTTPClientTransport,
  }));
  return clientSdk;
}

export type McpServerStatus = 'connecting' | 'connected' | 'error' | 'closed';

/** A tool as the server lists it (the fields Cairn uses). */
export interface McpToolInfo {
  readonly name: string;
  readonly description: string;
  readonly inputSchema: unknown;
}

export interface McpBackoff {
  /** First reconnect delay; doubles on each failure. */
  readonly initialMs: number;
  readonly maxMs: number;
}

export const DEFAULT_MCP_BACKOFF: McpBackoff = { initialMs: 1_000, maxMs: 60_000 };
/** The last lines a child wrote to stderr, kept to explain a failed start. */
const STDERR_TAIL_CHARS = 400;

export interface McpConnectionLog {
  info(message: string): void;
  warn(message: string): void;
}

export interface McpConnectionOptions {
  readonly backoff?: McpBackoff;
  /** Retry after a failure or a drop (default true). */
  readonly reconnect?: boolean;
  readonly log: McpConnectionLog;
  /** Called whenever the set of usable tools changes (connect, drop, list change). */
  readonly onToolsChanged: () => void;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Tool-list changes closer together than this are one burst: logged when it starts, counted when it ends. */
const CHANGE_BURST_QUIET_MS = 1_000;

export class McpConnection {
  private client: Client | undefined;
  private transport: Transport | undefined;
  /** Set with the transport when it is a stdio child (for `pid`). */
  private stdio: StdioClientTransport | undefined;
  private currentStatus: McpServerStatus = 'connecting';
  private lastError: string | undefined;
  private listed: McpToolInfo[] = [];
  private failures = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closing = false;
  /** Bumped when an attempt is abandoned (time limit), so its late steps undo themselves. */
  private attempt = 0;
  private stderrTail = '';
  /** Tool-list changes of the current burst, and the timer that ends it. */
  private changes = 0;
  private changeTimer: NodeJS.Timeout | undefined;
  private readonly backoff: McpBackoff;

  constructor(
    readonly settings: McpServerSettings,
    private readonly options: McpConnectionOptions,
  ) {
    this.backoff = options.backoff ?? DEFAULT_MCP_BACKOFF;
  }

  get name(): string {
    return this.settings.name;
  }

  get status(): McpServerStatus {
    return this.currentStatus;
  }

  /** Why the server is not connected, scrubbed of secrets; undefined when it is. */
  get error(): string | undefined {
    return this.lastError;
  }

  /** The server's tools while connected; none otherwise. */
  get tools(): readonly McpToolInfo[] {
    return this.currentStatus === 'connected' ? this.listed : [];
  }

  /** The child's pid (stdio servers), for operators and tests. */
  get pid(): number | undefined {
    return this.stdio !== undefined && this.transport === this.stdio
      ? (this.stdio.pid ?? undefined)
      : undefined;
  }

  /**
   * One connection attempt within the server's time limit. Never throws: a
   * failure is recorded (status `error`) and a reconnect is scheduled.
   */
  async connect(): Promise<void> {
    if (this.closing) return;
    // While retrying, health keeps saying `error` with the last reason.
    if (this.currentStatus !== 'error') this.currentStatus = 'connecting';
    if (this.settings.missingEnv.length > 0) {
      // Not retried: the environment of a running process does not change.
      this.fail(
        `environment variable(s) ${this.settings.missingEnv.join(', ')} not set (referenced as \${VAR} in cairn.json)`,
        false,
      );
      return;
    }
    try {
      await withTimeout(this.open(this.attempt), this.settings.connectTimeoutMs, 'connecting');
      if (this.closing) {
        await this.dispose();
        return;
      }
      this.failures = 0;
      this.currentStatus = 'connected';
      this.lastError = undefined;
      this.options.log.info(
        `MCP server "${this.name}" connected with ${this.listed.length} tool(s)`,
      );
      this.options.onToolsChanged();
    } catch (err) {
      this.attempt += 1;
      await this.dispose();
      this.fail(this.describeFailure(err), true);
    }
  }

  /** Calls one tool; rejects when not connected, on timeout, or when aborted. */
  async callTool(
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<McpCallResult> {
    const client = this.client;
    if (this.currentStatus !== 'connected' || !client) {
      throw new Error(
        `MCP server "${this.name}" is not connected${this.lastError ? ` (${this.lastError})` : ''}; Cairn is reconnecting, try again later.`,
      );
    }
    try {
      return (await client.callTool({ name, arguments: args }, undefined, {
        signal,
        timeout: this.settings.timeoutMs,
      })) as McpCallResult;
    } catch (err) {
      throw new Error(this.scrub(describeError(err)), { cause: err });
    }
  }

  /** Stops reconnecting and closes the connection (a stdio child is terminated). */
  async close(): Promise<void> {
    this.closing = true;
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.changeTimer);
    await this.dispose();
    this.currentStatus = 'closed';
  }

  private async open(attempt: number): Promise<void> {
    const sdk = await loadClientSdk();
    if (this.settings.transport === 'stdio') {
      await this.openWith(sdk, this.stdioTransport(sdk), attempt);
      return;
    }
    const url = new URL(this.settings.url);
    const requestInit = { headers: { ...this.settings.headers } };
    try {
      await this.openWith(
        sdk,
        new sdk.StreamableHTTPClientTransport(url, { requestInit }),
        attempt,
      );
    } catch (streamableError) {
      if (attempt !== this.attempt || this.closing) throw streamableError;
      // Servers from before Streamable HTTP (protocol 2024-11-05) speak SSE.
      await this.dispose();
      try {
        await this.openWith(sdk, new sdk.SSEClientTransport(url, { requestInit }), attempt);
      } catch (sseError) {
        throw new Error(
          `Streamable HTTP: ${describeError(streamableError)}; SSE fallback: ${describeError(sseError)}`,
        );
      }
    }
  }

  private stdioTransport(sdk: ClientSdk): StdioClientTransport {
    const settings = this.settings;
    if (settings.transport !== 'stdio') throw new Error('not a stdio server');
    this.stderrTail = '';
    const transport = new sdk.StdioClientTransport({
      command: settings.command,
      args: [...settings.args],
      env: { ...settings.env },
      cwd: settings.cwd,
      // Piped, not inherited: `cairn mcp` speaks MCP on its own stdout, and the
      // tail explains a server that exits at start.
      stderr: 'pipe',
    });
    (transport.stderr as Readable | null)?.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_CHARS);
    });
    this.stdio = transport;
    return transport;
  }

  private async openWith(sdk: ClientSdk, transport: Transport, attempt: number): Promise<void> {
    const client = new sdk.Client(
      { name: 'cairn', version: VERSION },
      {
        capabilities: {},
        listChanged: {
          tools: {
            debounceMs: 50,
            onChanged: (error, tools) => {
              if (error || !tools || client !== this.client) return;
              this.listed = tools.filter(callable).map(toInfo);
              this.noteToolsChanged();
              this.options.onToolsChanged();
            },
          },
        },
      },
    );
    this.client = client;
    this.transport = transport;
    await client.connect(transport, { timeout: this.settings.connectTimeoutMs });
    const listed = await this.listAll(client);
    if (attempt !== this.attempt) {
      // Abandoned at the time limit while it was still on its way.
      await client.close().catch(() => undefined);
      throw new Error('connection attempt abandoned');
    }
    this.listed = listed;
    client.onclose = () => {
      if (client !== this.client || this.closing) return;
      this.client = undefined;
      this.transport = undefined;
      this.fail(`the connection closed${this.stderrHint()}`, true);
      this.options.onToolsChanged();
    };
  }

  private async listAll(client: Client): Promise<McpToolInfo[]> {
    const tools: McpToolInfo[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor });
      tools.push(...page.tools.filter(callable).map(toInfo));
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    return tools;
  }

  /**
   * Logs tool-list changes once per burst: the first change at once, then
   * nothing until the server has been quiet for a while, then one line with
   * the burst's count. A server that announces a change ten times a second
   * would otherwise write ten lines a second, and one that never stops would,
   * if the line waited for quiet, never be logged at all.
   */
  private noteToolsChanged(): void {
    if (this.changes === 0) {
      this.options.log.info(
        `MCP server "${this.name}" changed its tools (${this.listed.length} now); further changes are counted until it has been quiet for ${CHANGE_BURST_QUIET_MS} ms`,
      );
    }
    this.changes += 1;
    clearTimeout(this.changeTimer);
    this.changeTimer = setTimeout(() => {
      const times = this.changes;
      this.changes = 0;
      if (times > 1) {
        this.options.log.info(
          `MCP server "${this.name}" changed its tools ${times} times in one burst, now over (${this.listed.length} now)`,
        );
      }
    }, CHANGE_BURST_QUIET_MS);
    this.changeTimer.unref();
  }

  private async dispose(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.transport = undefined;
    if (client) await client.close().catch(() => undefined);
  }

  private fail(reason: string, retry: boolean): void {
    this.currentStatus = 'error';
    this.lastError = this.scrub(reason);
    if (!retry || this.closing || this.options.reconnect === false) {
      this.options.log.warn(`MCP server "${this.name}" is unavailable: ${this.lastError}`);
      return;
    }
    const base = Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.failures);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.failures += 1;
    this.options.log.warn(
      `MCP server "${this.name}" is unavailable: ${this.lastError}; retrying in ${delay} ms`,
    );
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => void this.connect(), delay);
    this.reconnectTimer.unref();
  }

  private describeFailure(err: unknown): string {
    return `${describeError(err)}${this.stderrHint()}`;
  }

  private stderrHint(): string {
    const last = this.stderrTail.trim().split('\n').pop()?.trim();
    return last ? ` (server said: ${last})` : '';
  }

  /** Replaces every value read from the environment with `***`. */
  scrub(text: string): string {
    let out = text;
    for (const secret of this.settings.secrets) out = out.split(secret).join('***');
    return out;
  }
}

/** Tools that can only run as MCP tasks cannot be called with a plain `tools/call`. */
function callable(tool: { execution?: { taskSupport?: string } }): boolean {
  return tool.execution?.taskSupport !== 'required';
}

function toInfo(tool: { name: string; description?: string; inputSchema: unknown }): McpToolInfo {
  return { name: tool.name, description: tool.description ?? '', inputSchema: tool.inputSchema };
}
