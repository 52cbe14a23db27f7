/**
 * The model-call records' two budgets, measured: what a record costs in
 * storage over a 200-turn conversation, and what recording adds to a turn.
 *
 * Two apps in this process, from dist/, each on its own SQLite file and the
 * shipped demo agent, the model the bench's fake over loopback in its own
 * process (it answers "ok"): one with `records.enabled` (the default), one
 * with it off. Each round starts one new session per app and runs
 * TURNS_PER_SESSION turns on both, alternating which app goes first, so the
 * conversation grows to 400 messages in front of the model and machine noise
 * hits both alike. User messages are USER_CHARS characters.
 *
 * - storage: bytes the records of one 200-turn session take in the database
 *   (text lengths of every model_calls column plus 8 per number, and the
 *   session's blobs), per call; beside it what storing each request whole
 *   would take. Every request is rebuilt (GET /calls/:id) and checked to be
 *   the one the model saw (it ends with the turn's question) before the row is printed.
 * - added per turn: median turn time with records on minus off (chats.run, in
 *   process), and the same for this process's CPU time per turn (steadier on
 *   a busy machine). Encoding and the write happen as the turn ends (or, for
 *   anything left, a moment later: the timed window waits for that moment on
 *   both apps), so the write is counted in the turn that caused it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { writeFileSync, readFileSync } from 'node:fs';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';
import type { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { writeDemoHome } from './bench-app.js';
import { percentile } from './compacted-tail.js';

const DIST = new URL('../../dist/', import.meta.url);
const TURNS_PER_SESSION = 200;
const ROUNDS = 3;
const WARMUP_TURNS = 60;
const USER_CHARS = 240;
const BUDGET_BYTES_PER_CALL = 2048;
const BUDGET_ADDED_MS = 0.2;

interface BenchApp {
  app: AppModule.CairnApp;
  agentName: string;
  close(): Promise<void>;
}

async function start(baseURL: string, recordsEnabled: boolean): Promise<BenchApp> {
  const home = mkdtempSync(join(tmpdir(), 'cairn-bench-records-'));
  const agent = writeDemoHome(home, baseURL);
  const configPath = join(home, 'cairn.json');
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  writeFileSync(configPath, JSON.stringify({ ...config, records: { enabled: recordsEnabled } }));
  const { startApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
  const { loadSettings } = (await import(
    new URL('config/settings.js', DIST).href
  )) as typeof SettingsModule;
  const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
  return {
    app,
    agentName: agent.name,
    close: async () => {
      await app.close();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

function question(turn: number): string {
  const head = `Question ${turn}: `;
  return (
    head +
    'please look at this and tell me what you think of it. '
      .repeat(8)
      .slice(0, USER_CHARS - head.length)
  );
}

async function turn(bench: BenchApp, sessionId: string | undefined, text: string) {
  const result = await bench.app.chats.run({
    agentName: bench.agentName,
    message: text,
    ...(sessionId ? { sessionId } : {}),
  });
  if (result.reply !== 'ok') throw new Error(`call records bench: reply ${result.reply}`);
  return result.sessionId;
}

/** Bytes the records of `sessionId` take: every text column's length, 8 per number, the blobs. */
function recordBytes(store: SqliteStore, sessionId: string): { calls: number; bytes: number } {
  const text = [
    'id',
    'session_id',
    'role',
    'provider',
    'model',
    'response_model',
    'created_at',
    'finish_reason',
    'response',
    'error_code',
    'error',
    'fallback_hops',
    'recalled_seqs',
    'params_ref',
    'chain_id',
    'base_call_id',
    'message_refs',
  ]
    .map((c) => `COALESCE(length(${c}), 0)`)
    .join(' + ');
  const numbers = 9;
  const row = store.db
    .prepare(
      `SELECT (SELECT COUNT(*) FROM model_calls WHERE session_id = @s) AS calls,
         (SELECT COALESCE(SUM(${text} + ${8 * numbers}), 0) FROM model_calls WHERE session_id = @s) AS call_bytes,
         (SELECT COALESCE(SUM(length(hash) + length(session_id) + length(body)), 0)
            FROM model_call_blobs WHERE session_id = @s) AS blob_bytes`,
    )
    .get({ s: sessionId }) as { calls: number; call_bytes: number; blob_bytes: number };
  return { calls: row.calls, bytes: row.call_bytes + row.blob_bytes };
}

export async function callRecordRows(baseURL: string): Promise<string[][]> {
  const on = await start(baseURL, true);
  const off = await start(baseURL, false);
  try {
    for (const bench of [on, off]) {
      let warm: string | undefined;
      for (let i = 0; i < WARMUP_TURNS; i++) warm = await turn(bench, warm, question(i));
    }
    const times = { on: [] as number[], off: [] as number[] };
    const cpuMicros = { on: 0, off: 0 };
    let recorded = '';
    for (let round = 0; round < ROUNDS; round++) {
      const sessions: { on?: string; off?: string } = {};
      for (let i = 0; i < TURNS_PER_SESSION; i++) {
        const order = (i + round) % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const);
        for (const which of order) {
          const bench = which === 'on' ? on : off;
          const cpuBefore = process.cpuUsage();
          const started = performance.now();
          sessions[which] = await turn(bench, sessions[which], question(i));
          // The record's write is scheduled on the turn (setImmediate): let it
          // land inside this turn's window, not in the next app's turn.
          await new Promise((resolve) => setImmediate(resolve));
          await new Promise((resolve) => setImmediate(resolve));
          times[which].push(performance.now() - started);
          const cpu = process.cpuUsage(cpuBefore);
          cpuMicros[which] += cpu.user + cpu.system;
        }
      }
      recorded = sessions.on!;
    }

    // Read back: every request rebuilt, and the storage of the last session.
    const list = await on.app.server.inject({
      url: `/sessions/${recorded}/calls?limit=500`,
    });
    const calls = list.json<{ calls: { id: string }[] }>().calls;
    if (calls.length !== TURNS_PER_SESSION)
      throw new Error(
        `call records bench: ${calls.length} calls recorded, not ${TURNS_PER_SESSION}`,
      );
    let wholeBytes = 0;
    for (const [index, call] of calls.entries()) {
      const res = await on.app.server.inject({ url: `/calls/${call.id}` });
      const request = res.json<{ call: { request: { messages: { content: string }[] } } }>().call
        .request;
      const last = request.messages[request.messages.length - 1]!.content;
      if (last !== question(TURNS_PER_SESSION - 1 - index))
        throw new Error('call records bench: a rebuilt request is not the one the model saw');
      wholeBytes += JSON.stringify(request).length;
    }
    const storage = recordBytes(on.app.store as SqliteStore, recorded);
    const perCall = storage.bytes / storage.calls;

    const sortedOn = [...times.on].sort((a, b) => a - b);
    const sortedOff = [...times.off].sort((a, b) => a - b);
    const medianOn = percentile(sortedOn, 50);
    const medianOff = percentile(sortedOff, 50);
    const added = medianOn - medianOff;
    const cpuOn = cpuMicros.on / 1000 / times.on.length;
    const cpuOff = cpuMicros.off / 1000 / times.off.length;
    return [
      [
        `model-call records: storage per call over a ${TURNS_PER_SESSION}-turn conversation (${USER_CHARS}-char questions, up to ${TURNS_PER_SESSION * 2} messages sent)`,
        `${(perCall / 1024).toFixed(2)} KB per call (${(storage.bytes / 1024).toFixed(0)} KB for ${storage.calls} calls; each request whole: ${(wholeBytes / storage.calls / 1024).toFixed(1)} KB per call)`,
        `≤ ${BUDGET_BYTES_PER_CALL / 1024} KB`,
        perCall <= BUDGET_BYTES_PER_CALL ? '✓' : '✗',
      ],
      [
        `model-call records: added to a turn's median (chats.run in process, records on − off, ${times.on.length} turns each, interleaved)`,
        `${added.toFixed(3)} ms (${medianOn.toFixed(2)} ms on / ${medianOff.toFixed(2)} ms off; CPU per turn ${cpuOn.toFixed(3)} / ${cpuOff.toFixed(3)} ms, +${(cpuOn - cpuOff).toFixed(3)} ms)`,
        `≤ ${BUDGET_ADDED_MS} ms`,
        added <= BUDGET_ADDED_MS ? '✓' : '✗',
      ],
    ];
  } finally {
    await on.close();
    await off.close();
  }
}
