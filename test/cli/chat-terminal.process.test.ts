/**
 * `cairn chat` typed at a real terminal: under tmux,
 * stdin is a pty, so readline runs interactively with its prompt. A line typed
 * while a reply is still running is sent next, in order, and end of input
 * (Ctrl-D) exits 0. Tool calls, their results and an `ask_user` question show
 * on the screen, and the line typed next answers the question. A chat that
 * cannot start (no such agent, no such session, another agent's session)
 * prints one error line and nothing else, with advice in CLI terms; a first
 * turn refused by the server leaves no session line behind.
 */
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';
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
    home = makeHome(
      {
        agents: {
          assistant: TEST_AGENT,
          asker: { ...TEST_AGENT, name: 'asker', tools: ['ask_user', 'current_time'] },
          broken: { ...TEST_AGENT, name: 'broken', tools: ['no_such_tool'] },
        },
      },
      fake.baseURL,
    );
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

  const screenOf = (name: string): string =>
    tmux('capture-pane', '-p', '-J', '-S', '-200', '-t', name);
  const screen = (): string => screenOf('chat');
  /** Starts `cairn chat <args>` in tmux session `name`; the shell then prints its exit code and stays. */
  const startChat = (name: string, args: string): void => {
    const command = [
      `CAIRN_URL=${quote(server.url)}`,
      quote(process.execPath),
      quote(CLI_PATH),
      `chat ${args};`,
      'echo "exit=$?";',
      'sleep 60',
    ].join(' ');
    tmux('new-session', '-d', '-s', name, '-x', '200', '-y', '50', command);
  };
  const type = (name: string, line: string): void => {
    tmux('send-keys', '-t', name, '-l', line);
    tmux('send-keys', '-t', name, 'Enter');
  };

  it('sends a line typed while a reply runs after it, in order, and exits 0 on Ctrl-D', async () => {
    fake.script({ content: 'slow answer', delayMs: 1_500 }, { content: 'second answer' });
    // The shell stays after the CLI exits, so its exit code can be read off the screen.
    startChat('chat', 'assistant');

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

  it('shows tool calls, results and an ask_user question; the next line typed answers it', async () => {
    fake.reset();
    fake.script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { tool_calls: [{ name: 'ask_user', arguments: '{"question":"Which city do you mean?"}' }] },
      { content: 'Lisbon it is.' },
    );
    startChat('ask', 'asker');
    const shown = (): string => screenOf('ask');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/chatting with asker/);
    type('ask', 'weather?');
    await expect.poll(shown, { timeout: 15_000 }).toContain('[question] Which city do you mean?');
    expect(shown()).toContain('[tool current_time({})]');
    expect(shown()).toMatch(/\[result current_time: .+\]/);
    type('ask', 'Lisbon');
    await expect.poll(shown, { timeout: 15_000 }).toContain('Lisbon it is.');
    tmux('send-keys', '-t', 'ask', 'C-d');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/exit=\d+/);
    expect(shown()).toContain('exit=0');

    // The typed line went to the model as the user's answer, after the question.
    const last = fake.requests.at(-1)!.body.messages as { role: string; content: string }[];
    expect(last.at(-1)).toMatchObject({ role: 'user', content: 'Lisbon' });
  });

  it('names the server in its banner, and answers /help and /session itself', async () => {
    fake.reset();
    startChat('help', 'assistant');
    const shown = (): string => screenOf('help');
    await expect
      .poll(shown, { timeout: 15_000 })
      .toContain(`chatting with assistant on ${server.url}`);
    type('help', '/help');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/^\s*\/compact \[instructions\]/m);
    type('help', '/session');
    await expect.poll(shown, { timeout: 15_000 }).toContain('no session yet');
    tmux('send-keys', '-t', 'help', 'C-d');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/exit=\d+/);
    expect(shown()).toContain('exit=0');
    expect(fake.requests).toHaveLength(0);
  });

  /** Runs `cairn chat <args>` until it exits; returns the screen. */
  const chatUntilExit = async (name: string, args: string): Promise<string> => {
    startChat(name, args);
    await expect.poll(() => screenOf(name), { timeout: 15_000 }).toMatch(/exit=\d+/);
    return screenOf(name);
  };

  it('refuses an unknown agent with one line naming the agents there, before any banner', async () => {
    const shown = await chatUntilExit('noagent', 'nosuch');
    expect(shown).toContain('error: no agent "nosuch"');
    expect(shown).toMatch(/it has: asker, assistant/);
    expect(shown).not.toContain('chatting with');
    expect(shown).not.toContain('GET /');
    expect(shown).toContain('exit=1');
  });

  it('refuses an unknown --session before any banner, prints no session line, and points at cairn sessions', async () => {
    const shown = await chatUntilExit(
      'nosession',
      'assistant --session sess_000000000000000000000000',
    );
    expect(shown).toContain('error SESSION_NOT_FOUND');
    expect(shown).toContain('`cairn sessions`');
    expect(shown).not.toContain('GET /sessions');
    expect(shown).not.toContain('chatting with');
    expect(shown).not.toMatch(/^session: /m);
    expect(shown).toContain('exit=1');
  });

  it("refuses another agent's session with the command that continues it", async () => {
    const res = await fetch(`${server.url}/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ agentName: 'assistant' }),
    });
    const { session } = (await res.json()) as { session: { id: string } };
    const shown = await chatUntilExit('mismatch', `asker --session ${session.id}`);
    expect(shown).toContain(`Run \`cairn chat assistant --session ${session.id}\``);
    expect(shown).not.toContain('chatting with');
    expect(shown).toContain('exit=1');
  });

  it('prints no session line after a first turn the server refused (it left no session)', async () => {
    fake.reset();
    startChat('refused', 'broken');
    const shown = (): string => screenOf('refused');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/chatting with broken/);
    type('refused', 'hi');
    await expect.poll(shown, { timeout: 15_000 }).toContain('error VALIDATION_ERROR');
    tmux('send-keys', '-t', 'refused', 'C-d');
    await expect.poll(shown, { timeout: 15_000 }).toMatch(/exit=\d+/);
    expect(shown()).toContain('no_such_tool');
    expect(shown()).not.toMatch(/^session: /m);
    const listed = (await (await fetch(`${server.url}/sessions?agentName=broken`)).json()) as {
      sessions: unknown[];
    };
    expect(listed.sessions).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });
});
