/**
 * `cairn sessions export <id> [--output file]` and `cairn sessions import
 * <file>`: the NDJSON of GET /sessions/:id/export and POST /sessions/import,
 * streamed both ways. A progress bar is drawn on stderr when it is a terminal
 * and the session is large; otherwise one line reports the result.
 */
import { createReadStream, createWriteStream, statSync } from 'node:fs';
import { once } from 'node:events';
import { Readable } from 'node:stream';
import { CliUsageError, download, upload, type ClientOptions } from './client.js';

const NDJSON = 'application/x-ndjson';
/** Below this many messages (or bytes on import) the bar would only flicker. */
const PROGRESS_MIN_MESSAGES = 1_000;
const PROGRESS_MIN_BYTES = 1024 * 1024;
const BAR_WIDTH = 30;

/** `1 message`, `2 messages`: the count a report line names. */
export function countOf(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}

function onTerminal(): boolean {
  return process.stderr.isTTY === true;
}

/** A one-line progress bar on stderr, redrawn in place; silent unless enabled. */
export class ProgressBar {
  private last = -1;

  constructor(
    private readonly total: number,
    private readonly unit: string,
    private readonly enabled: boolean,
  ) {}

  update(done: number): void {
    if (!this.enabled || this.total <= 0) return;
    const percent = Math.min(100, Math.floor((done / this.total) * 100));
    if (percent === this.last) return;
    this.last = percent;
    const filled = Math.round((percent / 100) * BAR_WIDTH);
    process.stderr.write(
      `\r[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${percent}% ${done}/${this.total} ${this.unit}`,
    );
  }

  finish(): void {
    if (this.enabled && this.last >= 0) process.stderr.write('\n');
  }
}

/** Writes the export to `output` (or stdout); reports the message count on stderr. */
export async function exportSession(
  sessionId: string,
  options: ClientOptions & { output?: string },
): Promise<void> {
  const response = await download(options, `/sessions/${encodeURIComponent(sessionId)}/export`);
  const out = options.output ? createWriteStream(options.output) : process.stdout;
  let bar: ProgressBar | undefined;
  let messages = 0;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    if (!out.write(chunk)) await once(out, 'drain');
    // Count lines as they pass, for the progress bar; the bytes go out unchanged.
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 1);
      if (bar === undefined) {
        const total = (JSON.parse(line) as { session: { message_count: number } }).session
          .message_count;
        bar = new ProgressBar(total, 'messages', onTerminal() && total >= PROGRESS_MIN_MESSAGES);
      } else if (line.startsWith('{"type":"message"')) bar.update(++messages);
    }
  }
  bar?.finish();
  if (out !== process.stdout) {
    out.end();
    await once(out, 'finish');
  }
  process.stderr.write(
    `exported ${countOf(messages, 'message')} of ${sessionId}${options.output ? ` to ${options.output}` : ''}\n`,
  );
}

/** Streams `file` to POST /sessions/import; prints the new session id. */
export async function importSessionFile(file: string, options: ClientOptions): Promise<void> {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (err) {
    throw new CliUsageError(
      `cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'}): pass the file written by \`cairn sessions export\`.`,
    );
  }
  const bar = new ProgressBar(size, 'bytes', onTerminal() && size >= PROGRESS_MIN_BYTES);
  let sent = 0;
  const source = createReadStream(file);
  source.on('data', (chunk) => bar.update((sent += chunk.length)));
  const body = Readable.toWeb(source) as ReadableStream<Uint8Array>;
  const result = (await upload(options, '/sessions/import', NDJSON, body)) as {
    session: { id: string; message_count: number };
  };
  bar.finish();
  console.log(
    `imported ${file} as ${result.session.id} (${countOf(result.session.message_count, 'message')})`,
  );
}
