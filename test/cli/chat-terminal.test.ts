/**
 * `cairn chat` typed at a real terminal (issue 11, items 1 and 2): under tmux,
 * stdin is a pty, so readline runs interactively with its prompt. A line typed
 * while a reply is still running is sent next, in order, and end of input
 * (Ctrl-D) exits 0.
 */
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { CLI_PATH, spawnServer, type ServerProcess } from '../process/spawn-server.js';

/** A tmux server of this test only (its own socket), so nothing else is touched. */
const SOCKET = `cairn-chat-test-${process.pid}`;
const tmux = (...args: string[]): string =>
  execFileSync('tmux', ['-L', SOCKET, ...args], { encoding: 'utf8' });
const quote = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

describe('cairn chat at a terminal', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({}, fake.baseURL);
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    try {
      tmux('kill-server');
    } catch {
      // Already gone: the session ended.
    }
    await server.stop('SIGTERM');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  const screen = (): string => tmux('capture-pane', '-p', '-J', '-S', '-200', '-t', 'chat');

  it('sends a line typed while a reply runs after it, in order, and exits 0 on Ctrl-D', async () => {
    fake.script({ content: 'slow answer', delayMs: 1_500 }, { content: 'second answer' });
    // The shell stays after the CLI exits, so its exit code can be read off the screen.
    const command = [
      `CAIRN_URL=${quote(server.url)}`,
      quote(process.execPath),
      quote(CLI_PATH),
      'chat assistant;',
      'echo "exit=$?";',
      'sleep 60',
    ].join(' ');
    tmux('new-session', '-d', '-s', 'chat', '-x', '200', '-y', '50', command);

    await expect.poll(screen, { timeout: 15_000 }).toMatch(/chatting with assistant/);
    tmux('send-keys', '-t', 'chat', '-l', 'first');
    tmux('send-keys', '-t', 'chat', 'Enter');
    // The first reply is being produced now: type the next line meanwhile.
    await expect.poll(() => fake.requests.length, { timeout: 10_000 }).toBe(1);
    tmux('send-keys', '-t', 'chat', '-l', 'second');
    tmux('send-keys', '-t', 'chat', 'Enter');
    await expect.poll(screen, { timeout: 15_000 }).toContain('second answer');
    tmux('send-keys', '-t', 'chat', 'C-d');
    await expect.poll(screen, { timeout: 15_000 }).toMatch(/exit=\d+/);

    const shown = screen();
    expect(shown).toContain('exit=0');
    expect(shown.indexOf('slow answer')).toBeLessThan(shown.indexOf('second answer'));
    const sessionId = /session: (sess_\w+)/.exec(shown)![1];
    const res = await fetch(`${server.url}/sessions/${sessionId}/messages`);
    const body = (await res.json()) as { messages: { role: string; content: string | null }[] };
    expect(body.messages.filter((m) => m.role === 'user').map((m) => m.content)).toEqual([
      'first',
      'second',
    ]);
  });
});
