#!/usr/bin/env node
/** The `cairn` command line (commander). `npm start` runs `cairn serve`. */
import { Command } from 'commander';
import { CairnError } from '../errors.js';
import { VERSION } from '../version.js';
import { chat } from './chat.js';
import { forTheTerminal } from './cli-hints.js';
import { ApiError, CliUsageError, UnreachableError } from './client.js';
import {
  compact,
  init,
  listSessions,
  nextSteps,
  runMigrations,
  validateAgents,
} from './commands.js';
import { evalCompaction, type EvalCompactionOptions } from './eval-compaction.js';
import { serveMcpStdio } from './mcp-stdio.js';
import { serve } from './serve.js';
import { exportSession, importSessionFile } from './session-transfer.js';
import { createKey, listKeys, revokeKey } from './keys.js';

function fail(err: unknown): never {
  if (err instanceof ApiError)
    console.error(`error ${err.code}: ${forTheTerminal(err.message, err.server)}`);
  else if (err instanceof CairnError) console.error(`error ${err.code}: ${err.message}`);
  else if (err instanceof CliUsageError || err instanceof UnreachableError)
    console.error(`error: ${err.message}`);
  else console.error(`error: ${(err as Error).message}`);
  process.exit(1);
}

/**
 * A subcommand's options plus its parent's --url: commander gives the parent's
 * option to the subcommand wherever on the line it is typed.
 */
function withParentUrl<T extends object>(options: T, command: Command): T & { url?: string } {
  const { url } = command.optsWithGlobals<{ url?: string }>();
  return { ...options, ...(url ? { url } : {}) };
}

const program = new Command()
  .name('cairn')
  .description('Self-hosted agent server')
  .version(VERSION);

program
  .command('serve')
  .description('run the HTTP server (what npm start runs)')
  .option('--no-daemons', 'do not run scheduled daemon agents')
  .action(async (options: { daemons: boolean }) => {
    await serve(options).catch(fail);
  });

program
  .command('init [dir]')
  .description('create cairn.json and a demo agent in dir (default: .)')
  .action((dir?: string) => {
    const created = init(dir);
    console.log(
      created.length ? created.map((f) => `created ${f}`).join('\n') : 'nothing to do: files exist',
    );
    console.log(nextSteps(dir));
  });

program
  .command('agents')
  .description('agent tools')
  .command('validate')
  .description(
    'check every agents/<name>/agent.json (and the MCP servers and tools they name); exit 1 on any problem',
  )
  .action(async () => {
    process.exitCode = await validateAgents().catch(fail);
  });

program
  .command('mcp')
  .description('serve the agents as MCP tools (chat_with_<agent>) on stdin/stdout')
  .action(async () => {
    await serveMcpStdio().catch(fail);
  });

program
  .command('chat <agent>')
  .description('chat with an agent on a running server (streamed)')
  .option('--session <id>', 'continue this session')
  .option('--url <url>', 'server URL (default: CAIRN_URL or cairn.json host/port)')
  .action(async (agent: string, options: { session?: string; url?: string }) => {
    await chat(agent, options).catch(fail);
  });

const sessions = program
  .command('sessions')
  .description('list recent sessions on a running server (or export / import one)')
  .option('--agent <name>', 'only this agent')
  .option('--limit <n>', 'how many', '20')
  .option('--url <url>', 'server URL')
  .action(async (options: { agent?: string; limit?: string; url?: string }) => {
    await listSessions(options).catch(fail);
  });

sessions
  .command('export <sessionId>')
  .description('write a session as NDJSON (messages, summary, compaction history)')
  .option('-o, --output <file>', 'write to this file instead of stdout')
  .action(async (sessionId: string, options: { output?: string }, command: Command) => {
    await exportSession(sessionId, withParentUrl(options, command)).catch(fail);
  });

sessions
  .command('import <file>')
  .description('import a session exported with `cairn sessions export`; prints its new id')
  .action(async (file: string, _options: unknown, command: Command) => {
    await importSessionFile(file, withParentUrl({}, command)).catch(fail);
  });

const keys = program
  .command('keys')
  .description('client keys on a running server (needs the admin key, CAIRN_API_KEY)')
  .option('--url <url>', 'server URL');

keys
  .command('create <name>')
  .description('issue a client key; prints its secret once')
  .option('--agents <names>', 'comma-separated agents the key may use (default: all, "*")')
  .option('--rpm <n>', 'requests per minute')
  .option('--tokens-per-day <n>', 'model tokens per UTC day')
  .action(
    async (
      name: string,
      options: { agents?: string; rpm?: string; tokensPerDay?: string },
      command: Command,
    ) => {
      await createKey(name, withParentUrl(options, command)).catch(fail);
    },
  );

keys
  .command('list')
  .description('list client keys (never their secrets)')
  .action(async (_options: unknown, command: Command) => {
    await listKeys(withParentUrl({}, command)).catch(fail);
  });

keys
  .command('revoke <keyId>')
  .description('revoke a client key at once, on every instance')
  .action(async (id: string, _options: unknown, command: Command) => {
    await revokeKey(id, withParentUrl({}, command)).catch(fail);
  });

program
  .command('compact <sessionId>')
  .description('compact a session now (defaultCompaction)')
  .option('--dry-run', 'show what would be compacted, without calling the model')
  .option('--undo', 'undo the latest compaction')
  .option('--instructions <text>', 'extra instructions for the summary')
  .option('--url <url>', 'server URL')
  .action(
    async (
      sessionId: string,
      options: { dryRun?: boolean; undo?: boolean; instructions?: string; url?: string },
    ) => {
      await compact(sessionId, options).catch(fail);
    },
  );

program
  .command('eval')
  .description('measurements')
  .command('compaction')
  .description(
    'measure what compaction keeps: plant facts in a generated conversation, force rolling compactions, probe each fact',
  )
  .option('--agent <name>', 'agent to evaluate (default: the first agent)')
  .option(
    '--model-url <url>',
    'an OpenAI-compatible server for both roles (default: the offline model)',
  )
  .option('--facts <n>', 'facts to plant', '40')
  .option('--compactions <n>', 'rolling compactions to force', '10')
  .option('--seed <n>', 'seed of the generated conversation', '1')
  .option('--json', 'print the report as JSON')
  .action(async (options: EvalCompactionOptions) => {
    await evalCompaction(options).catch(fail);
  });

program
  .command('migrate')
  .description('apply database migrations')
  .action(async () => {
    try {
      await runMigrations();
    } catch (err) {
      fail(err);
    }
  });

await program.parseAsync();
