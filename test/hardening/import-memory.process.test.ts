/**
 * Parallel imports of huge lines against a real `cairn serve` process: the
 * server's peak resident memory grows by a bounded amount (imports are read
 * as streams, a few at a time, one line held at most), `/health` answers
 * while they run, lines over the limit are refused with IMPORT_LINE_TOO_LONG
 * and leave no session behind, and lines under it are imported whole.
 */
import { readFileSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeHome } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from '../process/spawn-server.js';

const MiB = 1024 * 1024;
const CHUNK_BYTES = 64 * 1024;
/** Lines just under and just over the 16 MiB line limit. */
const UNDER_LIMIT_BYTES = 15 * MiB;
const OVER_LIMIT_BYTES = 17 * MiB;
const PARALLEL_UNDER = 4;
const PARALLEL_OVER = 4;
/**
 * What the peak RSS may grow by for all of them together. Eight imports of
 * 16 MB lines once took the server to 1.5 GB (and these eight to 640 MiB);
 * read two at a time, one line each, they grow it by 250-300 MiB.
 */
const PEAK_GROWTH_BOUND_BYTES = 480 * MiB;
const TIMEOUT_MS = 120_000;

const AGENT = { name: 'assistant', description: 'Import target', system: 'You help.', tools: [] };

/** `VmRSS` or `VmHWM` (peak RSS) of a process, in bytes. */
function memoryOf(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
  if (!match) throw new Error(`no ${field} in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

/** An export whose one message line is about `lineBytes` long. */
function exportWithLongLine(lineBytes: number): Buffer[] {
  const at = new Date().toISOString();
  const head = [
    JSON.stringify({
      type: 'session',
      format: 'cairn.session',
      version: 1,
      session: {
        agent_name: 'assistant',
        mode: 'chat',
        status: 'active',
        created_at: at,
        updated_at: at,
      },
    }),
    JSON.stringify({
      type: 'message',
      message: { seq: 1, role: 'system', content: 'You help.', created_at: at },
    }),
  ].join('\n');
  const prefix = `\n{"type":"message","message":{"seq":2,"role":"user","created_at":"${at}","content":"`;
  const suffix = '"}}\n';
  const filler = Buffer.alloc(CHUNK_BYTES, 'a');
  const chunks = [Buffer.from(head + prefix)];
  for (let sent = 0; sent < lineBytes; sent += CHUNK_BYTES) chunks.push(filler);
  chunks.push(Buffer.from(suffix));
  return chunks;
}

/** POSTs `chunks` as one NDJSON body, writing as the socket drains. */
function postImport(port: number, chunks: Buffer[]): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/sessions/import',
        headers: { 'content-type': 'application/x-ndjson' },
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    let i = 0;
    const write = (): void => {
      while (i < chunks.length) {
        if (!req.write(chunks[i++]!)) {
          req.once('drain', write);
          return;
        }
      }
      req.end();
    };
    write();
  });
}

describe('parallel imports of huge lines', () => {
  let home: string;
  let server: ServerProcess;

  beforeAll(async () => {
    home = makeHome({ agents: { assistant: AGENT } }, null);
    server = await spawnServer({ home });
  });
  afterAll(async () => {
    await server?.stop('SIGTERM');
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'stay within a memory bound, keep /health answering, and refuse over-long lines whole',
    async () => {
      const pid = server.child.pid!;
      // Warm up the import path once, so its code and buffers count in the baseline.
      const warm = await postImport(server.port, exportWithLongLine(CHUNK_BYTES));
      expect(warm.status, warm.body).toBe(201);
      const baseline = memoryOf(pid, 'VmRSS');

      let settled = 0;
      const track = <T>(p: Promise<T>) => p.finally(() => (settled += 1));
      const under = Array.from({ length: PARALLEL_UNDER }, () =>
        track(postImport(server.port, exportWithLongLine(UNDER_LIMIT_BYTES))),
      );
      const over = Array.from({ length: PARALLEL_OVER }, () =>
        track(postImport(server.port, exportWithLongLine(OVER_LIMIT_BYTES))),
      );
      const health = await fetch(`${server.url}/health`);
      expect(health.status).toBe(200);
      const settledWhenHealthAnswered = settled;

      const imported = await Promise.all(under);
      const refused = await Promise.all(over);
      expect(settledWhenHealthAnswered).toBeLessThan(PARALLEL_UNDER + PARALLEL_OVER);
      for (const res of imported) expect(res.status, res.body.slice(0, 200)).toBe(201);
      for (const res of refused) {
        expect(res.status).toBe(413);
        expect((JSON.parse(res.body) as { error: { code: string } }).error.code).toBe(
          'IMPORT_LINE_TOO_LONG',
        );
      }
      const growth = memoryOf(pid, 'VmHWM') - baseline;
      expect(growth).toBeLessThan(PEAK_GROWTH_BOUND_BYTES);

      // The refused imports left nothing; the others hold their whole line.
      const sessions = (await (await fetch(`${server.url}/sessions?limit=50`)).json()) as {
        sessions: { id: string; message_count: number }[];
      };
      expect(sessions.sessions).toHaveLength(1 + PARALLEL_UNDER);
      const big = sessions.sessions.filter((s) => s.message_count === 2);
      expect(big).toHaveLength(1 + PARALLEL_UNDER);
      console.log(`peak RSS growth for the parallel imports: ${Math.round(growth / MiB)} MiB`);
    },
    TIMEOUT_MS,
  );
});
