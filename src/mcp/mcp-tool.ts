/**
 * Wraps one MCP server tool as a Cairn `Tool`: the model sees
 * `<server>__<tool>` with the server's description and an adapted schema;
 * an `isError` result or a failed call becomes the tool's error result.
 */
import type { Tool } from '../tools/tool.js';
import { formatMcpResult } from './format-result.js';
import type { McpConnection, McpToolInfo } from './mcp-connection.js';
import { adaptInputSchema } from './schema-adapter.js';
import { modelToolName } from './tool-names.js';

/** Thrown for an `isError` result, so the loop records it as a failed call. */
export class McpToolError extends Error {}

export function mcpTool(connection: McpConnection, info: McpToolInfo): Tool {
  return {
    name: modelToolName(connection.name, info.name),
    description: info.description || `Tool "${info.name}" of the MCP server "${connection.name}".`,
    parameters: adaptInputSchema(info.inputSchema),
    // The SDK enforces the server's limit; the loop's timer is a backstop just after it.
    timeoutMs: connection.settings.timeoutMs + 1_000,
    async run(args, ctx) {
      const result = await connection.callTool(info.name, args, ctx.signal);
      const text = connection.scrub(formatMcpResult(result));
      if (result.isError) throw new McpToolError(text || 'the server reported an error');
      return text;
    },
  };
}
