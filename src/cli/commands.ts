/**
 * The CLI commands other than `serve`: init, agents validate, chat, sessions,
 * compact, migrate. Each prints for people and exits non-zero on failure.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { formatProblem, loadAgents } from '../agents/load-agents.js';
import type { AgentConfig } from '../agents/agent-config.js';
import { loadSettings, type Settings } from '../config/settings.js';
import { checkMcpToolEntries, usesMcp, type McpToolProblems } from '../mcp/check-agent-tools.js';
import { McpManager } from '../mcp/mcp-manager.js';
import { migrate, openDatabase } from '../store/sqlite/open-database.js';
import { request, streamEvents, type ClientOptions } from './client.js';

const DEMO_AGENT = {
  $schema: '../../schemas/agent.json',
  name: 'assistant',
  description: 'General helper',
  system: 'You are a helpful assistant. Answer clearly and briefly.',
  tools: ['current_time', 'history_search'],
  maxIterations: 10,
  defaultCompaction: { compactionCount: 50, autoThreshold: 80 },
};

/** `cairn init [dir]`: a project folder with cairn.json and a demo agent. */
export function init(dir = '.'): string[] {
  const home = resolve(dir);
  const created: string[] = [];
  const write = (path: string, content: string): void => {
    if (existsSync(path)) return;
    writeFileSync(path, content);
    created.push(path);
  };
  mkdirSync(join(home, 'agents', 'assistant'), { recursive: true });
  write(
    join(home, 'cairn.json'),
    `${JSON.stringify({ server: { host: '127.0.0.1', port: 5050 }, database: { path: 'data/cairn.db' } }, null, 2)}\n`,
  );
  const agent = { ...DEMO_AGENT } as Partial<typeof DEMO_AGENT>;
  delete agent.$schema;
  write(join(home, 'agents', 'assistant', 'agent.json'), `${JSON.stringify(agent, null, 2)}\n`);
  return created;
}

/**
 * `cairn agents validate`: prints every problem; returns the exit code. When an
 * agent names MCP tools, the configured servers are started (once, no retry)
 * to check that each named server and tool exists.
 */
export async function validateAgents(): Promise<number> {
  const settings = loadSettings();
  const { agents, problems } = loadAgents(settings.agentsDir);
  const mcpProblems = usesMcp(agents)
    ? await checkMcp(settings.mcpServers, agents)
    : { errors: [], warnings: [] };
  const failing = new Set(
    mcpProblems.errors.map((e) => /^agent "([^"]+)"/.exec(e)?.[1]).filter(Boolean),
  );
  for (const agent of agents) if (!failing.has(agent.name)) console.log(`ok    ${agent.name}`);
  for (const problem of problems) console.error(`error ${formatProblem(problem)}`);
  for (const error of mcpProblems.errors) console.error(`error ${error}`);
  for (const warning of mcpProblems.warnings) console.error(`warn  ${warning}`);
  if (agents.length === 0 && problems.length === 0)
    console.log(`no agents in ${settings.agentsDir}`);
  return problems.length > 0 || mcpProblems.errors.length > 0 ? 1 : 0;
}

async function checkMcp(
  servers: Settings['mcpServers'],
  agents: readonly AgentConfig[],
): Promise<McpToolProblems> {
  // A validation run reports a server's failure; it does not wait for reconnects.
  const mcp = new McpManager({
    servers,
    log: { info: () => undefined, warn: () => undefined },
    reconnect: false,
  });
  try {
    await mcp.start();
    return checkMcpToolEntries(agents, mcp);
  } finally {
    await mcp.close();
  }
}

/** `cairn migrate`: applies pending migrations and reports them. */
export function runMigrations(): void {
  const settings = loadSettings();
  const db = openDatabase(settings.database.path, { migrate: false });
  const ran = migrate(db);
  db.close();
  console.log(
    ran.length
      ? `applied migrations: ${ran.join(', ')}`
      : `database is up to date (${settings.database.path})`,
  );
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
  for (const s of body.sessions) {
    console.log(
      [
        s.id,
        s.agent_name.padEnd(16),
        s.mode.padEnd(8),
        s.status.padEnd(6),
        `${s.message_count} msgs`.padEnd(10),
        `compacted ${s.compact_size}`.padEnd(14),
        s.updated_at,
        s.title ?? '',
      ].join('  '),
    );
  }
}

/** `cairn compact <sessionId> [--dry-run] [--undo]`. */
export async function compact(
  sessionId: string,
  options: ClientOptions & { dryRun?: boolean; undo?: boolean; instructions?: string },
): Promise<void> {
  const path = `/sessions/${encodeURIComponent(sessionId)}/compact${options.undo ? '/undo' : ''}`;
  const body = options.undo
    ? undefined
    : {
        ...(options.dryRun ? { dryRun: true } : {}),
        ...(options.instructions ? { instructions: options.instructions } : {}),
      };
  const result = await request(options, 'POST', path, body);
  console.log(JSON.stringify(result, null, 2));
}

/** `cairn chat <agent> [--session id]`: an interactive, streamed chat. */
export async function chat(
  agent: string,
  options: ClientOptions & { session?: string },
): Promise<void> {
  const rl = createInterface({ input: process.stdin, output: process.stdout });
  let sessionId = options.session;
  console.log(
    `chatting with ${agent}${sessionId ? ` in ${sessionId}` : ''} — empty line or Ctrl-D to quit`,
  );
  try {
    for (;;) {
      let line: string;
      try {
        line = await rl.question('> ');
      } catch {
        break; // stdin closed
      }
      if (line.trim() === '') break;
      for await (const { event, data } of streamEvents(
        options,
        `/agents/${encodeURIComponent(agent)}/chat`,
        {
          message: line,
          ...(sessionId ? { sessionId } : {}),
        },
      )) {
        const payload = data as Record<string, unknown>;
        if (event === 'session') sessionId = String(payload.sessionId);
        else if (event === 'delta') process.stdout.write(String(payload.text));
        else if (event === 'tool_call')
          process.stdout.write(`\n[tool ${String(payload.name)}(${String(payload.arguments)})]\n`);
        else if (event === 'error') {
          const error = payload.error as { code: string; message: string };
          process.stdout.write(`\nerror ${error.code}: ${error.message}`);
        }
      }
      process.stdout.write('\n');
    }
  } finally {
    rl.close();
    if (sessionId) console.log(`session: ${sessionId}`);
  }
}
