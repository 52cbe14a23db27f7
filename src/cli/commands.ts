/**
 * The CLI commands other than `serve`: init, agents validate, chat, sessions,
 * compact, migrate. Each prints for people and exits non-zero on failure.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { checkAgentTools } from '../agents/check-agent-tools.js';
import { formatProblem, loadAgents, orderProblems } from '../agents/load-agents.js';
import type { AgentConfig } from '../agents/agent-config.js';
import { loadSettings, type Settings } from '../config/settings.js';
import { checkMcpToolEntries, usesMcp } from '../mcp/check-agent-tools.js';
import { McpManager } from '../mcp/mcp-manager.js';
import { builtinTools } from '../tools/builtins/index.js';
import { ToolCatalog } from '../tools/tool-catalog.js';
import { migrate, openDatabase } from '../store/sqlite/open-database.js';
import { migratePostgres, openPool } from '../store/postgres/open-pool.js';
import { CliUsageError, request, type ClientOptions } from './client.js';
import { describeCompaction, requestCompaction, type CompactRequest } from './compaction-report.js';

const DEMO_AGENT = {
  $schema: '../../schemas/agent.json',
  name: 'assistant',
  description: 'General helper',
  system: 'You are a helpful assistant. Answer clearly and briefly.',
  tools: ['current_time', 'history_search'],
  maxIterations: 10,
  defaultCompaction: { compactCount: 50, autoThreshold: 80 },
};

/** The schema shipped with Cairn (src/cli/ and dist/cli/ are both two levels below the root). */
const AGENT_SCHEMA_URL = new URL('../../schemas/agent.json', import.meta.url);

/**
 * `cairn init [dir]`: a project folder with cairn.json, a demo agent and a copy
 * of the agent schema at schemas/agent.json, so the agent's `$schema`
 * (`../../schemas/agent.json`) resolves from the new folder and editors can
 * autocomplete. Returns the files created.
 */
export function init(dir = '.'): string[] {
  const home = resolve(dir);
  const created: string[] = [];
  const write = (path: string, content: string): void => {
    if (existsSync(path)) return;
    writeFileSync(path, content);
    created.push(path);
  };
  mkdirSync(join(home, 'agents', 'assistant'), { recursive: true });
  mkdirSync(join(home, 'schemas'), { recursive: true });
  write(join(home, 'schemas', 'agent.json'), readFileSync(AGENT_SCHEMA_URL, 'utf8'));
  write(
    join(home, 'cairn.json'),
    `${JSON.stringify({ server: { host: '127.0.0.1', port: 5050 }, database: { path: 'data/cairn.db' } }, null, 2)}\n`,
  );
  write(
    join(home, 'agents', 'assistant', 'agent.json'),
    `${JSON.stringify(DEMO_AGENT, null, 2)}\n`,
  );
  return created;
}

/** What to type after `cairn init dir`: three commands, run in the new folder. */
export function nextSteps(dir = '.'): string {
  const home = resolve(dir);
  const here = home === process.cwd();
  return [
    `next${here ? '' : ` (in ${home}, or with CAIRN_HOME=${home})`}:`,
    '  cairn agents validate    # check the agent files',
    '  cairn serve              # start the server on http://127.0.0.1:5050 (leave it running)',
    '  cairn chat assistant     # in another terminal: talk to the demo agent',
  ].join('\n');
}

/** What `cairn agents validate` (and `cairn doctor`) found in the agents folder. */
export interface AgentCheck {
  /** Agents that load and whose tools all resolve, by name. */
  valid: string[];
  /** One line per problem (`<file>: <pointer> <rule>`, or an MCP entry's). */
  errors: string[];
  warnings: string[];
  /** How many agent folders were found, loadable or not. */
  found: number;
}

/**
 * The server's start-up checks of the agents (schema, paths, the MCP servers
 * and tools named, and every tool resolving). When an agent names MCP tools,
 * the configured servers are started (once, no retry).
 */
export async function checkAgents(settings: Settings): Promise<AgentCheck> {
  const { agents, problems: fileProblems, toolLists } = loadAgents(settings.agentsDir);
  const { mcpProblems, toolProblems } = await withMcp(settings.mcpServers, agents, async (mcp) => {
    const catalog = new ToolCatalog({ builtins: builtinTools(), ...(mcp ? { mcp } : {}) });
    return {
      mcpProblems: mcp ? checkMcpToolEntries(agents, mcp) : { errors: [], warnings: [] },
      toolProblems: await checkAgentTools(toolLists, (agent) => catalog.forAgent(agent)),
    };
  });
  const problems = orderProblems([...fileProblems, ...toolProblems]);
  const broken = new Set(toolProblems.map((p) => p.file));
  const mcpBroken = new Set(
    mcpProblems.errors.map((e) => /^agent "([^"]+)"/.exec(e)?.[1]).filter(Boolean),
  );
  // An MCP entry whose tools could not load is already a tool problem of its
  // file (with the file's path): its MCP check says the same thing again.
  const mcpErrors = mcpProblems.errors.filter((error) => {
    const [, agentName, entry] = /^agent "([^"]+)" \/tools\/\d+ "([^"]+)"/.exec(error) ?? [];
    const agent = agents.find((a) => a.name === agentName);
    return !(
      agent &&
      toolProblems.some(
        (p) => p.file === join(agent.dir, 'agent.json') && p.message.includes(`"${entry}"`),
      )
    );
  });
  return {
    valid: agents
      .filter((a) => !broken.has(join(a.dir, 'agent.json')) && !mcpBroken.has(a.name))
      .map((a) => a.name),
    errors: [...problems.map(formatProblem), ...mcpErrors],
    warnings: mcpProblems.warnings,
    found: agents.length + fileProblems.length,
  };
}

/** `cairn agents validate`: prints `checkAgents`' findings; returns the exit code. */
export async function validateAgents(): Promise<number> {
  const settings = loadSettings();
  const { valid, errors, warnings, found } = await checkAgents(settings);
  for (const name of valid) console.log(`ok    ${name}`);
  for (const error of errors) console.error(`error ${error}`);
  for (const warning of warnings) console.error(`warn  ${warning}`);
  if (found === 0 && errors.length === 0) console.log(`no agents in ${settings.agentsDir}`);
  return errors.length > 0 ? 1 : 0;
}

/** Runs `check` with the MCP servers started when an agent names MCP tools (none otherwise). */
async function withMcp<T>(
  servers: Settings['mcpServers'],
  agents: readonly AgentConfig[],
  check: (mcp: McpManager | undefined) => Promise<T>,
): Promise<T> {
  if (!usesMcp(agents)) return check(undefined);
  // A validation run reports a server's failure; it does not wait for reconnects.
  const mcp = new McpManager({
    servers,
    log: { info: () => undefined, warn: () => undefined },
    reconnect: false,
  });
  try {
    await mcp.start();
    return await check(mcp);
  } finally {
    await mcp.close();
  }
}

/** `cairn migrate`: applies pending migrations of the configured database (either dialect) and reports them. */
export async function runMigrations(): Promise<void> {
  const settings = loadSettings();
  const { url, path } = settings.database;
  let ran: number[];
  let where: string;
  if (url !== null) {
    const pool = openPool(url, { poolSize: 1 });
    try {
      ran = (await migratePostgres(pool)).ran;
    } finally {
      await pool.end();
    }
    where = describePostgresUrl(url);
  } else {
    const db = openDatabase(path, { migrate: false });
    try {
      ran = migrate(db);
    } finally {
      db.close();
    }
    where = path;
  }
  console.log(
    ran.length
      ? `applied migrations: ${ran.join(', ')} (${where})`
      : `database is up to date (${where})`,
  );
}

/** A Postgres URL for people: database and host, never the user or password. */
export function describePostgresUrl(url: string): string {
  try {
    const parsed = new URL(url);
    return `Postgres database ${parsed.pathname.replace(/^\//, '') || '(default)'} on ${parsed.host || 'the local socket'}`;
  } catch {
    return 'Postgres';
  }
}

interface SessionSummary {
  id: string;
  agent_name: string;
  mode: string;
  status: string;
  message_count: number;
  compact_size: number;
  updated_at: string;
  title: string | null;
}

/** `cairn sessions`: the most recent sessions as a table. */
export async function listSessions(
  options: ClientOptions & { agent?: string; limit?: string },
): Promise<void> {
  const query = new URLSearchParams();
  if (options.agent) query.set('agentName', options.agent);
  query.set('limit', options.limit ?? '20');
  const body = (await request(options, 'GET', `/sessions?${query.toString()}`)) as {
    sessions: SessionSummary[];
  };
  if (body.sessions.length === 0) return console.log('no sessions');
  const row = (cells: string[]): string => cells.join('  ').trimEnd();
  const columns = (s: SessionSummary): string[] => [
    s.id,
    s.agent_name.padEnd(16),
    s.mode.padEnd(8),
    s.status.padEnd(6),
    String(s.message_count).padEnd(8),
    String(s.compact_size).padEnd(9),
    s.updated_at.padEnd(24),
    s.title ?? '',
  ];
  const idWidth = body.sessions[0]!.id.length;
  console.log(
    row([
      'ID'.padEnd(idWidth),
      'AGENT'.padEnd(16),
      'MODE'.padEnd(8),
      'STATUS',
      'MESSAGES',
      'COMPACTED',
      'UPDATED'.padEnd(24),
      'TITLE',
    ]),
  );
  for (const s of body.sessions) console.log(row(columns(s)));
}

/**
 * `cairn compact <sessionId> [--dry-run] [--undo] [--instructions] [--json]`:
 * one line saying what happened, or the whole result with `--json`.
 */
export async function compact(
  sessionId: string,
  options: ClientOptions & CompactRequest & { json?: boolean },
): Promise<void> {
  if (options.undo && (options.dryRun || options.instructions !== undefined)) {
    throw new CliUsageError(
      `--undo cannot be combined with ${options.dryRun ? '--dry-run' : '--instructions'}: undo restores the previous summary; run either \`cairn compact <id> --undo\` or \`cairn compact <id> --dry-run\`.`,
    );
  }
  const result = await requestCompaction(options, sessionId, options);
  console.log(options.json ? JSON.stringify(result, null, 2) : describeCompaction(result));
}
