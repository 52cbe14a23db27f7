/**
 * All configured MCP servers: connects them in parallel (each within its time
 * limit; a failure never stops Cairn) — in the background once the server
 * listens, so one slow server never delays start-up — answers which tools an
 * agent's `mcp:` entry stands for and which are not ready yet, reports
 * per-server health, and closes them all on shutdown.
 */
import type { McpServerSettings } from '../config/mcp-servers.js';
import { CairnError } from '../errors.js';
import type { Tool } from '../tools/tool.js';
import {
  McpConnection,
  type McpBackoff,
  type McpConnectionLog,
  type McpServerStatus,
} from './mcp-connection.js';
import { mcpTool } from './mcp-tool.js';
import { parseMcpToolSpec, type McpToolSpec } from '../tools/mcp-tool-spec.js';

export interface McpServerHealth {
  status: McpServerStatus;
  tools: number;
  error?: string;
}

export interface McpManagerOptions {
  servers: Readonly<Record<string, McpServerSettings>>;
  log: McpConnectionLog;
  backoff?: McpBackoff;
  /** Default true; `cairn agents validate` makes one attempt per server. */
  reconnect?: boolean;
}

/** An `mcp:` entry of an agent whose server is not connected: its tools are missing for now. */
export interface McpEntryNotReady {
  /** The entry as the agent lists it, e.g. `mcp:files/read_text_file`. */
  tool: string;
  status: Exclude<McpServerStatus, 'connected'>;
  error?: string;
}

export class McpManager {
  private readonly connections: ReadonlyMap<string, McpConnection>;
  private readonly listeners = new Set<() => void>();
  private firstAttempts: Promise<void> | undefined;

  constructor(options: McpManagerOptions) {
    this.connections = new Map(
      Object.values(options.servers).map((settings) => [
        settings.name,
        new McpConnection(settings, {
          log: options.log,
          ...(options.backoff ? { backoff: options.backoff } : {}),
          reconnect: options.reconnect ?? true,
          onToolsChanged: () => this.listeners.forEach((listener) => listener()),
        }),
      ]),
    );
  }

  /**
   * Connects every server in parallel; resolves when each has connected or
   * failed once (a failed one keeps retrying). Called again, it returns the
   * same first attempts: `cairn serve` starts them without waiting, and
   * whoever needs them settled (the start-up checks, tests) awaits this.
   */
  start(): Promise<void> {
    this.firstAttempts ??= Promise.all([...this.connections.values()].map((c) => c.connect())).then(
      () => undefined,
    );
    return this.firstAttempts;
  }

  /** Called whenever any server's usable tools change. */
  onToolsChanged(listener: () => void): void {
    this.listeners.add(listener);
  }

  has(server: string): boolean {
    return this.connections.has(server);
  }

  serverNames(): string[] {
    return [...this.connections.keys()];
  }

  findConnection(server: string): McpConnection | undefined {
    return this.connections.get(server);
  }

  /**
   * The tools an `mcp:` entry stands for right now. An unknown server is a
   * configuration error; a server that is down, or a tool it does not list,
   * yields no tools (they appear once the server is back).
   */
  toolsFor(spec: McpToolSpec, agentName: string): Tool[] {
    const connection = this.connections.get(spec.server);
    if (!connection) {
      throw new CairnError(
        'VALIDATION_ERROR',
        `Agent "${agentName}" lists "mcp:${spec.server}${spec.tool ? `/${spec.tool}` : ''}", but cairn.json has no MCP server "${spec.server}". Configured: ${this.serverNames().join(', ') || 'none'}.`,
      );
    }
    return connection.tools
      .filter((info) => spec.tool === undefined || info.name === spec.tool)
      .map((info) => mcpTool(connection, info));
  }

  /**
   * The entries of an agent's `tools` whose server is not connected (still
   * connecting after start-up, or failing): `GET /agents/:name` says so, so a
   * missing tool is explained rather than silently absent.
   */
  notReady(toolEntries: readonly string[]): McpEntryNotReady[] {
    const out: McpEntryNotReady[] = [];
    for (const entry of toolEntries) {
      const spec = parseMcpToolSpec(entry);
      const connection = spec && this.connections.get(spec.server);
      if (!connection || connection.status === 'connected') continue;
      out.push({
        tool: entry,
        status: connection.status,
        ...(connection.error !== undefined ? { error: connection.error } : {}),
      });
    }
    return out;
  }

  /** `GET /health`'s `mcp` field. */
  health(): Record<string, McpServerHealth> {
    const out: Record<string, McpServerHealth> = {};
    for (const [name, c] of this.connections) {
      out[name] = {
        status: c.status,
        tools: c.tools.length,
        ...(c.error !== undefined ? { error: c.error } : {}),
      };
    }
    return out;
  }

  /** Closes every connection; stdio children are terminated. */
  async close(): Promise<void> {
    await Promise.all([...this.connections.values()].map((c) => c.close()));
  }
}
