/**
 * The `mcp:` entries of an agent's `tools` list: `"mcp:<server>"` (every tool
 * of that server) or `"mcp:<server>/<tool>"` (one).
 */

export const MCP_TOOL_PREFIX = 'mcp:';

export interface McpToolSpec {
  readonly server: string;
  /** Absent: every tool of the server. */
  readonly tool?: string;
}

/** The parsed spec, or undefined when `entry` is not an `mcp:` entry. */
export function parseMcpToolSpec(entry: string): McpToolSpec | undefined {
  if (!entry.startsWith(MCP_TOOL_PREFIX)) return undefined;
  const rest = entry.slice(MCP_TOOL_PREFIX.length);
  const slash = rest.indexOf('/');
  return slash === -1
    ? { server: rest }
    : { server: rest.slice(0, slash), tool: rest.slice(slash + 1) };
}
