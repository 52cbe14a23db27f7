/**
 * Resolves an agent's `tools` list into a `ToolSet`: built-in names,
 * `agent:<name>` subagents, `./module.js` files inside the agent folder and
 * `mcp:<server>[/<tool>]` MCP tools. Module tools are imported once and cached.
 */
import { realpathSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError } from '../errors.js';
import { parseMcpToolSpec, type McpToolSpec } from './mcp-tool-spec.js';
import type { Tool } from './tool.js';
import { ToolSet } from './tool-set.js';

/** Builds a built-in tool for one agent (some built-ins depend on the agent). */
export type BuiltinFactory = (agent: AgentConfig) => Tool | Tool[];
/** Builds the tool that calls agent `name` as a subagent. */
export type SubagentFactory = (caller: AgentConfig, name: string) => Tool;

/** The tools an `mcp:` entry stands for right now (none while its server is down). */
export interface McpToolSource {
  toolsFor(spec: McpToolSpec, agentName: string): Tool[];
}

export interface ToolCatalogOptions {
  builtins: Readonly<Record<string, BuiltinFactory>>;
  subagent?: SubagentFactory;
  mcp?: McpToolSource;
}

function isInside(dir: string, file: string): boolean {
  const rel = relative(dir, file);
  return rel !== '' && !rel.startsWith('..') && !isAbsolute(rel) && !rel.split(sep).includes('..');
}

function assertToolShape(value: unknown, file: string): Tool {
  const tool = value as Partial<Tool> | undefined;
  if (
    !tool ||
    typeof tool.name !== 'string' ||
    !/^[a-zA-Z0-9_-]{1,64}$/.test(tool.name) ||
    typeof tool.description !== 'string' ||
    typeof tool.parameters !== 'object' ||
    tool.parameters === null ||
    typeof tool.run !== 'function'
  ) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `${file}: a tool module must export name (letters, digits, _ or -), description, parameters (JSON Schema) and run(args, ctx).`,
    );
  }
  return tool as Tool;
}

export class ToolCatalog {
  private readonly modules = new Map<string, Promise<Tool>>();
  private sets = new WeakMap<AgentConfig, Promise<ToolSet>>();

  constructor(private readonly options: ToolCatalogOptions) {}

  /** The names of the built-in tools. */
  builtinNames(): string[] {
    return Object.keys(this.options.builtins);
  }

  /**
   * The agent's tools, built once per loaded agent: a ToolSet compiles each
   * tool's argument schema, which must not happen on every turn.
   */
  forAgent(agent: AgentConfig): Promise<ToolSet> {
    let cached = this.sets.get(agent);
    if (!cached) {
      cached = this.build(agent);
      // A failure is not cached, so fixing a tool module fixes the agent.
      cached.catch(() => this.sets.delete(agent));
      this.sets.set(agent, cached);
    }
    return cached;
  }

  /** Forgets every built set, e.g. when an MCP server's tools changed. */
  invalidate(): void {
    this.sets = new WeakMap();
  }

  private async build(agent: AgentConfig): Promise<ToolSet> {
    const tools: Tool[] = [];
    for (const entry of agent.tools) {
      const mcpSpec = parseMcpToolSpec(entry);
      if (mcpSpec) {
        if (!this.options.mcp) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `Agent "${agent.name}" lists "${entry}", but no MCP servers are configured (cairn.json "mcpServers").`,
          );
        }
        tools.push(...this.options.mcp.toolsFor(mcpSpec, agent.name));
      } else if (entry.startsWith('agent:')) {
        if (!this.options.subagent) continue;
        tools.push(this.options.subagent(agent, entry.slice('agent:'.length)));
      } else if (entry.startsWith('./')) {
        tools.push(await this.loadModule(agent, entry));
      } else {
        const factory = this.options.builtins[entry];
        if (!factory) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `Agent "${agent.name}" lists unknown tool "${entry}". Built-in tools: ${this.builtinNames().join(', ')}.`,
          );
        }
        const made = factory(agent);
        tools.push(...(Array.isArray(made) ? made : [made]));
      }
    }
    return new ToolSet(tools);
  }

  private loadModule(agent: AgentConfig, entry: string): Promise<Tool> {
    const file = resolve(agent.dir, entry);
    let cached = this.modules.get(file);
    if (!cached) {
      cached = (async () => {
        let real: string;
        try {
          real = realpathSync(file);
        } catch {
          throw new CairnError(
            'VALIDATION_ERROR',
            `Agent "${agent.name}": tool module ${entry} does not exist.`,
          );
        }
        if (!isInside(realpathSync(agent.dir), real)) {
          throw new CairnError(
            'VALIDATION_ERROR',
            `Agent "${agent.name}": tool module ${entry} is outside the agent folder.`,
          );
        }
        const mod = (await import(pathToFileURL(real).href)) as { default?: unknown };
        return assertToolShape(mod.default ?? mod, entry);
      })();
      // A failed import is not cached, so fixing the file fixes the agent.
      cached.catch(() => this.modules.delete(file));
      this.modules.set(file, cached);
    }
    return cached;
  }
}
