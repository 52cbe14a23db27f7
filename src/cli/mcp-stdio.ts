/**
 * `cairn mcp`: Cairn as an MCP server on stdin/stdout, for MCP clients that
 * start their servers as child processes (desktop assistants, IDEs). Builds the
 * same app as `cairn serve` without listening; logs go to stderr, since stdout
 * carries the protocol. A line that is not one JSON-RPC message is answered
 * with a JSON-RPC error. Exits when the client closes stdin or on SIGTERM/SIGINT.
 */
import { startApp } from '../app.js';
import { loadSettings } from '../config/settings.js';
import { createCairnMcpServer } from '../mcp/cairn-mcp-server.js';
import { StdioLineTransport } from '../mcp/stdio-line-transport.js';
import { acquireProcessLock } from '../store/sqlite/process-lock.js';

export async function serveMcpStdio(): Promise<void> {
  const settings = loadSettings();
  // Start-up recovery marks running tasks interrupted and frees daemon leases:
  // beside a running `cairn serve` on the same file that would break its turns,
  // so `cairn mcp` takes the same one-process lock (use POST /mcp there instead).
  const lock =
    settings.database.kind === 'sqlite' ? acquireProcessLock(settings.database.path) : undefined;
  const app = await startApp(settings, {
    logger: { level: process.env.CAIRN_LOG_LEVEL ?? 'warn', stream: process.stderr },
    // Scheduled agents belong to the long-running `cairn serve`, not to each client's child.
    daemons: false,
  });
  const server = createCairnMcpServer({
    chats: app.chats,
    agents: app.agents,
    logError: (details, message) => app.server.log.error(details, message),
  });
  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    void server
      .close()
      .then(() => app.close())
      .then(() => lock?.release())
      .then(
        () => process.exit(0),
        () => process.exit(1),
      );
  };
  server.onclose = stop;
  process.stdin.on('end', stop);
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  // Cairn's own line transport: a bad line gets a JSON-RPC error reply, not silence.
  await server.connect(new StdioLineTransport());
}
