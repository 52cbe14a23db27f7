/**
 * `node --expose-gc dist-bench/bench/idle-rss.js [turns]`: the idle-RSS row
 * alone, with where the memory goes. Builds the app on the demo
 * home like `npm run bench`, measures RSS after GC right after start, runs
 * `turns` chat turns over HTTP (default 2 000) against the fake model, and
 * measures again; prints process.memoryUsage() at each point, and what the
 * tokenizer's tables add on their own (loaded by the first token estimate).
 * After start and after the turns it also waits for V8's memory reducer
 * (bench/idle-memory.ts) and prints what the idle process holds then.
 * Try `node --expose-gc --max-semi-space-size=1 …` to see how much of the
 * heap is V8's young generation grown during start-up (a flag the process
 * must start with: v8.setFlagsFromString has no effect on it later).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';
import { writeDemoHome } from './bench-app.js';
import { startScript } from './child-script.js';
import { usageWhenIdle } from './idle-memory.js';

const DIST = new URL('../../dist/', import.meta.url);
const TURNS = Number(process.argv[2] ?? 2_000);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function settle(): Promise<NodeJS.MemoryUsage> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with node --expose-gc');
  gc();
  gc();
  await sleep(200);
  gc();
  return process.memoryUsage();
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/** The memory once V8's memory reducer has run on the idle process, as a line. */
async function idleLine(label: string): Promise<string> {
  const { usage, reducedAfterS } = await usageWhenIdle();
  const when =
    reducedAfterS === null
      ? 'the memory reducer did not run in time'
      : `the memory reducer ran after ${reducedAfterS.toFixed(1)} s`;
  return line(`${label}, idle (${when})`, usage);
}
function line(label: string, m: NodeJS.MemoryUsage): string {
  return `${label}: rss ${mb(m.rss)} | heapTotal ${mb(m.heapTotal)} heapUsed ${mb(m.heapUsed)} | external ${mb(m.external)} (arrayBuffers ${mb(m.arrayBuffers)})`;
}

const keepAlive = new http.Agent({ keepAlive: true });
function post(port: number, path: string, body: unknown): Promise<string> {
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent: keepAlive,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
      },
      (res) => {
        let out = '';
        res.setEncoding('utf8').on('data', (c: string) => (out += c));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(out) : reject(new Error(`${res.statusCode} ${out}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(text);
  });
}

async function main(): Promise<void> {
  const home = mkdtempSync(join(tmpdir(), 'cairn-rss-'));
  const fake = startScript('fake-model.js', []);
  try {
    const { baseURL } = JSON.parse(await fake.line) as { baseURL: string };
    writeDemoHome(home, baseURL, { port: 0 });
    const { startApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
    const { loadSettings } = (await import(
      new URL('config/settings.js', DIST).href
    )) as typeof SettingsModule;
    const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
    await app.server.listen({ host: '127.0.0.1', port: 0 });
    console.log(line('after start', await settle()));
    console.log(await idleLine('after start'));
    // What the first estimate costs (the tokenizer's tables), apart from the turns.
    const { estimateTextTokens } = (await import(new URL('llm/tokens.js', DIST).href)) as {
      estimateTextTokens: (text: string) => number;
    };
    estimateTextTokens('warm up the tokenizer');
    console.log(line('after loading the tokenizer', await settle()));
    const { port } = app.server.server.address() as AddressInfo;
    const sessions: string[] = [];
    for (let i = 0; i < TURNS; i++) {
      const sessionId = sessions[i % 10];
      const reply = JSON.parse(
        await post(port, '/agents/assistant/chat', { message: `question ${i}`, sessionId }),
      ) as { sessionId: string };
      if (sessionId === undefined) sessions.push(reply.sessionId);
    }
    console.log(line(`after ${TURNS} turns`, await settle()));
    console.log(await idleLine(`after ${TURNS} turns`));
    await app.close();
  } finally {
    keepAlive.destroy();
    fake.child.kill('SIGTERM');
    rmSync(home, { recursive: true, force: true });
  }
}

await main();
