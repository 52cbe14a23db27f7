/**
 * Checks agents' `mcp:` entries against the configured servers: an unknown
 * server is an error, and so is a tool the (connected) server does not list;
 * a server that could not be reached leaves its entries unchecked (a warning).
 * Used by `cairn agents validate` and logged at start-up.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { McpManager } from './mcp-manager.js';
import { parseMcpToolSpec } from '../tools/mcp-tool-spec.js';
import { didYouMean } from '../config/nearest-name.js';

export interface McpToolProblems {
  errors: string[];
  warnings: string[];
}

export function checkMcpToolEntries(
  agents: readonly AgentConfig[],
  mcp: McpManager,
): McpToolProblems {
  const errors: string[] = [];
  const warnings: string[] = [];
  for (const agent of agents) {
    agent.tools.forEach((entry, i) => {
      const spec = parseMcpToolSpec(entry);
      if (!spec) return;
      const where = `agent "${agent.name}" /tools/${i} "${entry}"`;
      const connection = mcp.findConnection(spec.server);
      if (!connection) {
        errors.push(
          `${where}: no MCP server "${spec.server}" in cairn.json${didYouMean(spec.server, mcp.serverNames())} (configured: ${mcp.serverNames().join(', ') || 'none'})`,
        );
        return;
      }
      if (connection.status !== 'connected') {
        warnings.push(
          `${where}: not checked, MCP server "${spec.server}" is unavailable (${connection.error ?? connection.status})`,
        );
        return;
      }
      if (spec.tool !== undefined && !connection.tools.some((t) => t.name === spec.tool)) {
        errors.push(
          `${where}: MCP server "${spec.server}" has no tool "${spec.tool}"${didYouMean(
            spec.tool,
            connection.tools.map((t) => t.name),
          )} (it has: ${connection.tools.map((t) => t.name).join(', ') || 'none'})`,
        );
      }
    });
  }
  return { errors, warnings };
}

/** Whether any agent names an MCP tool (so `validate` need not start servers otherwise). */
export function usesMcp(agents: readonly AgentConfig[]): boolean {
  return agents.some((a) => a.tools.some((t) => parseMcpToolSpec(t) !== undefined));
}
