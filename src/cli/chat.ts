/**
 * `cairn chat <agent>`: an interactive, streamed chat against a running server.
 * Every line typed or piped is queued and sent in order, one turn at a time,
 * so nothing typed while a reply streams is lost; end of input ends the chat
 * with exit code 0. A few lines are the CLI's own commands (`/help`,
 * `/session`, `/compact`, `/quit`), answered here and never sent to the model;
 * any other line, `/tool …` included, is a message.
 */
import { createInterface } from 'node:readline';
import { forTheTerminal } from './cli-hints.js';
import { isSessionNotFound } from '../store/session-not-found.js';
import {
  ApiError,
  CliUsageError,
  request,
  serverUrl,
  streamEvents,
  type ClientOptions,
} from './client.js';
import { describeCompaction, requestCompaction } from './compaction-report.js';

/** Tool results longer than this are clipped on screen (the server keeps them whole). */
const TOOL_RESULT_PREVIEW_CHARS = 200;
const QUIT_COMMAND = '/quit';

/** The chat's own commands, as `/help` lists them. */
const LOCAL_COMMANDS = [
  ['/help', 'list these commands'],
  ['/session', 'show the session id, the server and how much of the session is compacted'],
  ['/compact [instructions]', 'compact the session now (instructions for the summary optional)'],
  [QUIT_COMMAND, 'end the chat (as Ctrl-D does)'],
] as const;

/** `/help` and friends; any other line, one starting with a slash too, goes to the model. */
const LOCAL_COMMAND = /^\/(help|session|compact)(?:\s+(.*))?$/;

interface DoneEnvelope {
  reply?: string;
  compaction?: {
    runs: number;
    compactedCount: number;
    input_tokens?: number;
    output_tokens?: number;
  } | null;
}

/** Lines from stdin, in order; `next()` resolves undefined at end of input. */
class LineQueue {
  private readonly lines: string[] = [];
  private ended = false;
  private wake: (() => void) | undefined;

  push(line: string): void {
    this.lines.push(line);
    this.wake?.();
  }

  end(): void {
    this.ended = true;
    this.wake?.();
  }

  get waiting(): number {
    return this.lines.length;
  }

  async next(): Promise<string | undefined> {
    while (this.lines.length === 0 && !this.ended) {
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
    return this.lines.shift();
  }
}

/**
 * Checks the agent (and the session, when one is named) before anything is
 * printed, so a typo fails with one error line and no banner or session line.
 */
async function checkTarget(agent: string, options: ClientOptions & { session?: string }) {
  try {
    await request(options, 'GET', `/agents/${encodeURIComponent(agent)}`);
  } catch (err) {
    // An agent whose file is invalid gets the server's message: it names the problem.
    if (
      !(err instanceof ApiError) ||
      err.code !== 'AGENT_NOT_FOUND' ||
      /not loaded/.test(err.message)
    )
      throw err;
    const { agents } = (await request(options, 'GET', '/agents')) as {
      agents: { name: string }[];
    };
    const names = agents.map((a) => a.name).join(', ') || 'none';
    throw new CliUsageError(`no agent "${agent}" on ${serverUrl(options)} (it has: ${names}).`);
  }
  if (options.session === undefined) return;
  const { session } = (await request(
    options,
    'GET',
    `/sessions/${encodeURIComponent(options.session)}`,
  )) as { session: { agent_name: string; status: string } };
  if (session.agent_name !== agent)
    throw new CliUsageError(
      `session ${options.session} belongs to agent "${session.agent_name}". Run \`cairn chat ${session.agent_name} --session ${options.session}\`.`,
    );
  if (session.status === 'closed')
    throw new CliUsageError(
      `session ${options.session} is closed. Run \`cairn chat ${agent}\` for a new one.`,
    );
}

export async function chat(
  agent: string,
  options: ClientOptions & { session?: string },
): Promise<void> {
  await checkTarget(agent, options);
  const interactive = process.stdin.isTTY === true;
  const rl = createInterface({
    input: process.stdin,
    ...(interactive ? { output: process.stdout, terminal: true } : { terminal: false }),
  });
  const queue = new LineQueue();
  rl.on('line', (line) => queue.push(line));
  rl.on('close', () => queue.end());
  const prompt = (): void => {
    if (interactive && queue.waiting === 0) rl.prompt();
  };
  rl.setPrompt('> ');

  let sessionId = options.session;
  console.log(
    `chatting with ${agent}${sessionId ? ` in ${sessionId}` : ''} on ${serverUrl(options)} — Ctrl-D or ${QUIT_COMMAND} to quit, /help for commands`,
  );
  try {
    prompt();
    for (let line = await queue.next(); line !== undefined; line = await queue.next()) {
      if (line.trim() === QUIT_COMMAND) break;
      const local = LOCAL_COMMAND.exec(line.trim());
      if (local) await runLocalCommand(local[1]!, local[2], sessionId, options);
      // A blank line is not a message (the server would refuse it); skip it.
      else if (line.trim() !== '') sessionId = await turn(agent, line, sessionId, options);
      prompt();
    }
  } finally {
    rl.close();
    if (sessionId) console.log(`session: ${sessionId}`);
  }
}

/**
 * Answers one of the chat's own commands. A server error is printed and the
 * chat goes on, as after a failed turn.
 */
async function runLocalCommand(
  command: string,
  argument: string | undefined,
  sessionId: string | undefined,
  options: ClientOptions,
): Promise<void> {
  const say = (text: string): void => console.log(text);
  if (command === 'help') {
    const width = Math.max(...LOCAL_COMMANDS.map(([name]) => name.length));
    say('commands (anything else you type is sent to the agent):');
    for (const [name, what] of LOCAL_COMMANDS) say(`  ${name.padEnd(width)}  ${what}`);
    return;
  }
  if (sessionId === undefined) {
    say(
      command === 'session'
        ? `no session yet on ${serverUrl(options)}: your first message starts one.`
        : 'nothing to compact yet: there is no session until your first message.',
    );
    return;
  }
  try {
    if (command === 'session') {
      const { session } = (await request(
        options,
        'GET',
        `/sessions/${encodeURIComponent(sessionId)}`,
      )) as {
        session: { message_count: number; compact_size: number; compaction_count: number };
      };
      say(
        `session ${sessionId} on ${serverUrl(options)}: ${session.message_count} messages, ${session.compact_size} of them in the summary (${session.compaction_count} compactions). Continue it later with --session ${sessionId}.`,
      );
      return;
    }
    const instructions = argument?.trim();
    say(
      describeCompaction(
        await requestCompaction(options, sessionId, instructions ? { instructions } : {}),
      ),
    );
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    say(`error ${err.code}: ${forTheTerminal(err.message, err.server)}`);
  }
}

/** Sends one message, prints the streamed turn, returns the session id. */
async function turn(
  agent: string,
  message: string,
  sessionId: string | undefined,
  options: ClientOptions,
): Promise<string | undefined> {
  const out = (text: string): boolean => process.stdout.write(text);
  const started = sessionId;
  let failed = false;
  let printedText = false;
  let question: string | undefined;
  for await (const { event, data } of streamEvents(
    options,
    `/agents/${encodeURIComponent(agent)}/chat`,
    { message, ...(sessionId ? { sessionId } : {}) },
  )) {
    const payload = data as Record<string, unknown>;
    if (event === 'session') sessionId = String(payload.sessionId);
    else if (event === 'delta') {
      printedText = true;
      out(String(payload.text));
    } else if (event === 'tool_call') {
      if (payload.name === 'ask_user') {
        question = askedQuestion(payload.arguments);
        out(`\n[question] ${question}\n`);
      } else out(`\n[tool ${String(payload.name)}(${String(payload.arguments)})]\n`);
    } else if (event === 'tool_result') {
      out(
        `[result ${String(payload.name)}${payload.isError === true ? ' (error)' : ''}: ${clip(String(payload.content))}]\n`,
      );
    } else if (event === 'done') {
      const done = payload as DoneEnvelope;
      // A reply that was not streamed as text (e.g. a question asked with ask_user).
      if (!printedText && done.reply && done.reply !== question) out(done.reply);
      if (done.compaction) out(`\n${describeAutoCompaction(done.compaction)}`);
    } else if (event === 'error') {
      const error = payload.error as { code: string; message: string };
      out(`\nerror ${error.code}: ${forTheTerminal(error.message, serverUrl(options))}`);
      failed = true;
    }
  }
  out('\n');
  // A first turn refused before it began leaves no session: forget its id.
  if (
    failed &&
    started === undefined &&
    sessionId !== undefined &&
    !(await exists(sessionId, options))
  )
    return undefined;
  return sessionId;
}

async function exists(sessionId: string, options: ClientOptions): Promise<boolean> {
  try {
    await request(options, 'GET', `/sessions/${encodeURIComponent(sessionId)}`);
    return true;
  } catch (err) {
    if (err instanceof ApiError && isSessionNotFound(err.code)) return false;
    throw err;
  }
}

function askedQuestion(args: unknown): string {
  try {
    const parsed = JSON.parse(String(args)) as { question?: unknown };
    if (typeof parsed.question === 'string') return parsed.question;
  } catch {
    // Not JSON: show the raw arguments.
  }
  return String(args);
}

function describeAutoCompaction(c: NonNullable<DoneEnvelope['compaction']>): string {
  const cost =
    c.input_tokens !== undefined && c.output_tokens !== undefined
      ? `, ${c.input_tokens} in / ${c.output_tokens} out tokens`
      : '';
  return `[compacted ${c.compactedCount} earlier messages automatically (${c.runs} run${c.runs === 1 ? '' : 's'}${cost})]`;
}

function clip(text: string): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > TOOL_RESULT_PREVIEW_CHARS
    ? `${flat.slice(0, TOOL_RESULT_PREVIEW_CHARS)}…`
    : flat;
}
