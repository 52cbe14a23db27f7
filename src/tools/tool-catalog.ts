/**
 * Resolves an agent's `tools` list into a `ToolSet`: built-in names,
 * `agent:<name>` subagents, `./module.js` files inside the agent folder and
 * `mcp:<server>[/<tool>]` MCP tools, each through `resolveSpec` (the one place
 * a new kind of spec plugs in). Entries marked `approval: "required"` (and
 * modules exporting it) get tools whose calls wait for a person. Module tools
 * are imported once and cached.
 */
import { realpathSync } from 'node:fs';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AgentConfig } from '../agents/agent-config.js';
import { CairnError, describeError } from '../errors.js';
import { nearestName } from '../config/nearest-name.js';
import { parseMcpToolSpec, type McpToolSpec } from './mcp-tool-spec.js';
import type { Tool } from './tool.js';
import { ToolSet } from './tool-set.js';

/**
 * Tools one model request may offer: OpenAI refuses more than 128, and
 * OpenAI-compatible servers follow it. An agent past it would have every
 * turn refused by the provider, so it is a configuration error instead.
 */
export const MAX_TOOLS_PER_REQUEST = 128;

/** Throws a VALIDATION_ERROR naming the agent when `count` tools are more than a request may offer. */
export function assertOfferable(agentName: string, count: number): void {
  if (count <= MAX_TOOLS_PER_REQUEST) return;
  throw new CairnError(
    'VALIDATION_ERROR',
    `Agent "${agentName}" would offer ${count} tools to the model, more than the ${MAX_TOOLS_PER_REQUEST} a request may carry (the provider would refuse every turn). List fewer tools: name single MCP tools ("mcp:<server>/<tool>") instead of a whole server ("mcp:<server>").`,
  );
}

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

/** The same tool, with every call waiting for a person's approval. */
function requireApproval(tool: Tool, approvalTimeout: string | undefined): Tool {
  if (tool.approval === 'required' && approvalTimeout === undefined) return tool;
  return {
    name: tool.name,
    description: tool.description,
    parameters: tool.parameters,
    ...(tool.timeoutMs !== undefined ? { timeoutMs: tool.timeoutMs } : {}),
    approval: 'required',
    ...(approvalTimeout !== undefined ? { approvalTimeout } : {}),
    run: (args, ctx) => tool.run(args, ctx),
  };
}

/** `module` names it for the message, e.g. `Agent "x": tool module ./tools/y.js`. */
function assertToolShape(value: unknown, module: string): Tool {
  const tool = value as Partial<Tool> | undefined;
  if (tool && tool.approval !== undefined && tool.approval !== 'required') {
    throw new CairnError(
      'VALIDATION_ERROR',
      `${module}: "approval" must be "required" (or left out), found ${JSON.stringify(tool.approval)}.`,
    );
  }
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
      `${module} must export name (letters, digits, _ or -), description, parameters (JSON Schema) and run(args, ctx).`,
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
    for (const spec of agent.tools) {
      const resolved = await this.resolveSpec(agent, spec);
      const approval = agent.toolsNeedingApproval.includes(spec);
      const timeout = agent.approvalTimeouts?.[spec];
      tools.push(...resolved.map((tool) => (approval ? requireApproval(tool, timeout) : tool)));
    }
    assertOfferable(agent.name, tools.length);
    return new ToolSet(tools);
  }

  /** The tools one spec string of an agent's `tools` list stands for. */
  private async resolveSpec(agent: AgentConfig, spec: string): Promise<Tool[]> {
    const mcpSpec = parseMcpToolSpec(spec);
    if (mcpSpec) {
      if (!this.options.mcp) {
        throw new CairnError(
          'VALIDATION_ERROR',
          `Agent "${agent.name}" lists "${spec}", but no MCP servers are configured (cairn.json "mcpServers").`,
        );
      }
      return this.options.mcp.toolsFor(mcpSpec, agent.name);
    }
    if (spec.startsWith('agent:')) {
      if (!this.options.subagent) return [];
      return [this.options.subagent(agent, spec.slice('agent:'.length))];
    }
    if (spec.startsWith('./')) return [await this.loadModule(agent, spec)];
    const factory = this.options.builtins[spec];
    if (!factory) {
      const near = nearestName(spec, this.builtinNames());
      throw new CairnError(
        'VALIDATION_ERROR',
        `Agent "${agent.name}" lists unknown tool "${spec}".${near ? ` Did you mean "${near}"?` : ''} Built-in tools: ${this.builtinNames().join(', ')}.`,
      );
    }
    const made = factory(agent);
    return Array.isArray(made) ? made : [made];
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
        let mod: { default?: unknown };
        try {
          mod = (await import(pathToFileURL(real).href)) as { default?: unknown };
        } catch (err) {
          // A syntax error or a throw at import: name the module, or the
          // SyntaxError would read as a bad request body.
          throw new CairnError(
            'VALIDATION_ERROR',
            `Agent "${agent.name}": tool module ${entry} failed to load: ${describeError(err)}. Fix the module, then restart the server (Node keeps a module it has tried to import).`,
          );
        }
        return assertToolShape(mod.default ?? mod, `Agent "${agent.name}": tool module ${entry}`);
      })();
      // A failed import is not cached, so fixing the file fixes the agent.
      cached.catch(() => this.modules.delete(file));
      this.modules.set(file, cached);
    }
    return cached;
  }
}
