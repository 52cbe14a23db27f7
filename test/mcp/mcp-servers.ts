/**
 * The real MCP servers the tests run, from node_modules (never downloaded at
 * run time): the reference "everything" and "filesystem" servers, and a small
 * server built with the SDK whose tool list changes on demand.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { TestApp } from '../helpers/test-app.js';

const resolvePath = (specifier: string): string => fileURLToPath(import.meta.resolve(specifier));

export const EVERYTHING_SERVER = resolvePath(
  '@modelcontextprotocol/server-everything/dist/index.js',
);
export const FILESYSTEM_SERVER = resolvePath(
  '@modelcontextprotocol/server-filesystem/dist/index.js',
);
export const CHANGING_SERVER = fileURLToPath(
  new URL('../fixtures/mcp/changing-tools-server.mjs', import.meta.url),
);

/** cairn.json entry for the everything server over stdio. */
export function everythingStdio(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { command: process.execPath, args: [EVERYTHING_SERVER, 'stdio'], ...extra };
}

export interface HttpMcpServer {
  readonly port: number;
  readonly child: ChildProcess;
  stop(): Promise<void>;
}

/** Starts the everything server in an HTTP mode (`streamableHttp` or `sse`) on `port`. */
export async function startEverythingHttp(
  mode: 'streamableHttp' | 'sse',
  port: number,
): Promise<HttpMcpServer> {
  const child = spawn(process.execPath, [EVERYTHING_SERVER, mode], {
    env: { ...process.env, PORT: String(port) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let output = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`everything ${mode} did not start:\n${output}`)),
      15_000,
    );
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
      if (/listening|running/i.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`everything ${mode} exited with ${code}:\n${output}`));
    });
  });
  return {
    port,
    child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Polls `condition` every 20 ms until it holds, or fails after `timeoutMs`. */
export async function waitFor(
  what: string,
  condition: () => boolean,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export interface ToolTurn {
  status: number;
  reply: string;
  /** The tool message the model read in its next request. */
  toolResult: string;
  /** What the fake found wrong with that request (empty: a provider would accept it). */
  problems: string[];
}

/** One chat turn on agent `assistant` in which the model calls `tool` with `args`, then answers `reply`. */
export async function toolTurn(
  t: TestApp,
  tool: string,
  args: Record<string, unknown>,
  reply = 'done',
): Promise<ToolTurn> {
  const fake = t.fake!;
  fake.script(
    { tool_calls: [{ name: tool, arguments: JSON.stringify(args) }] },
    { content: reply },
  );
  const res = await t.app.server.inject({
    method: 'POST',
    url: '/agents/assistant/chat',
    payload: { message: `please use ${tool}` },
  });
  const last = fake.requests.at(-1)!;
  const messages = (last.body?.messages ?? []) as { role: string; content: string | null }[];
  return {
    status: res.statusCode,
    reply: res.statusCode === 200 ? res.json<{ reply: string }>().reply : res.body,
    toolResult: messages.find((m) => m.role === 'tool')?.content ?? '',
    problems: last.problems,
  };
}
