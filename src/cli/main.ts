#!/usr/bin/env node
/** The `cairn` command line (commander). `npm start` runs `cairn serve`. */
import { Command } from 'commander';
import { CairnError } from '../errors.js';
import { VERSION } from '../version.js';
import { chat } from './chat.js';
import { forTheTerminal } from './cli-hints.js';
import {
  ApiError,
  CliUsageError,
  resolveServer,
  UnreachableError,
  type ClientOptions,
} from './client.js';
import {
  compact,
  init,
  listSessions,
  nextSteps,
  runMigrations,
  validateAgents,
} from './commands.js';
import { doctor } from './doctor.js';
import { evalCompaction, type EvalCompactionOptions } from './eval-compaction.js';
import { evalRecall, type EvalRecallOptions } from './eval-recall.js';
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

/** Runs a command's work; any failure is one line on stderr and exit 1, never a stack trace. */
async function run(work: () => Promise<unknown>): Promise<void> {
  try {
    await work();
  } catch (err) {
    fail(err);
  }
}

/**
 * A client command's options with its server resolved once (--url, CAIRN_URL,
 * the address recorded by `cairn serve` in the home, the settings), so every
 * request of the command reaches the same server.
 */
function client<T extends ClientOptions>(options: T): T & Required<ClientOptions> {
  return { ...options, ...resolveServer(options) };
}

/**
 * A subcommand's options plus its parent's --url, server resolved: commander
 * gives the parent's option to the subcommand wherever on the line it is typed.
 */
function withParentUrl<T extends object>(
  options: T,
  command: Command,
): T & Required<ClientOptions> {
  const { url } = command.optsWithGlobals<{ url?: string }>();
  return client({ ...options, ...(url ? { url } : {}) });
}

const URL_HELP =
  'server URL (default: CAIRN_URL, else the address `cairn serve` recorded in this home, else cairn.json host/port)';

const program = new Command()
  .name('cairn')
  .description('Self-hosted agent server')
  .version(VERSION);

program
  .command('serve')
  .description('run the HTTP server (what npm start runs)')
  .option('--no-daemons', 'do not run scheduled daemon agents')
  .option(
    '--port <n>',
    'port to listen on (overrides CAIRN_PORT and server.port; 0: any free port)',
  )
  .option('--host <host>', 'address to listen on (overrides CAIRN_HOST and server.host)')
  .action(async (options: { daemons: boolean; port?: string; host?: string }) => {
    await run(() => serve(options));
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
  .command('doctor')
  .description(
    'check the settings, the database, that each model role answers a tiny request, and the agents; exit 1 on any failure',
  )
  .option('--timeout <ms>', 'how long each model may take to answer (default 15000)')
  .action(async (options: { timeout?: string }) => {
    await run(async () => {
      process.exitCode = await doctor(options);
    });
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
  .option('--url <url>', URL_HELP)
  .action(async (agent: string, options: { session?: string; url?: string }) => {
    await run(() => chat(agent, client(options)));
  });

const sessions = program
  .command('sessions')
  .description('list recent sessions on a running server (or export / import one)')
  .option('--agent <name>', 'only this agent')
  .option('--limit <n>', 'how many', '20')
  .option('--url <url>', URL_HELP)
  .action(async (options: { agent?: string; limit?: string; url?: string }) => {
    await run(() => listSessions(client(options)));
  });

sessions
  .command('export <sessionId>')
  .description('write a session as NDJSON (messages, summary, compaction history)')
  .option('-o, --output <file>', 'write to this file instead of stdout')
  .action(async (sessionId: string, options: { output?: string }, command: Command) => {
    await run(() => exportSession(sessionId, withParentUrl(options, command)));
  });

sessions
  .command('import <file>')
  .description('import a session exported with `cairn sessions export`; prints its new id')
  .action(async (file: string, _options: unknown, command: Command) => {
    await run(() => importSessionFile(file, withParentUrl({}, command)));
  });

const keys = program
  .command('keys')
  .description('client keys on a running server (needs the admin key, CAIRN_API_KEY)')
  .option('--url <url>', URL_HELP);

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
      await run(() => createKey(name, withParentUrl(options, command)));
    },
  );

keys
  .command('list')
  .description('list client keys (never their secrets)')
  .action(async (_options: unknown, command: Command) => {
    await run(() => listKeys(withParentUrl({}, command)));
  });

keys
  .command('revoke <keyId>')
  .description('revoke a client key at once, on every instance')
  .action(async (id: string, _options: unknown, command: Command) => {
    await run(() => revokeKey(id, withParentUrl({}, command)));
  });

program
  .command('compact <sessionId>')
  .description('compact a session now (defaultCompaction)')
  .option('--dry-run', 'show what would be compacted, without calling the model')
  .option('--undo', 'undo the latest compaction')
  .option('--instructions <text>', 'extra instructions for the summary')
  .option('--json', 'print the whole result as JSON instead of a one-line summary')
  .option('--url <url>', URL_HELP)
  .action(
    async (
      sessionId: string,
      options: {
        dryRun?: boolean;
        undo?: boolean;
        instructions?: string;
        json?: boolean;
        url?: string;
      },
    ) => {
      await run(() => compact(sessionId, client(options)));
    },
  );

const evalCommand = program.command('eval').description('measurements');

evalCommand
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

evalCommand
  .command('recall')
  .description(
    'measure automatic recall on long conversations: seed each, compact it, ask each question in a fork (lexical, and hybrid when an embed role is available)',
  )
  .option('--data <file>', 'conversations and questions (default: the file shipped with Cairn)')
  .option(
    '--embed <role>',
    'hybrid recall with "local" (the bundled model) or "none" (lexical only); default: the embed role of cairn.json, if any',
  )
  .option('--compacted <share>', 'share of each conversation behind the compaction pointer', '0.9')
  .option('--agent <name>', 'agent to evaluate (default: the first agent)')
  .option('--json', 'print the report as JSON')
  .action(async (options: EvalRecallOptions) => {
    await evalRecall(options).catch(fail);
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
