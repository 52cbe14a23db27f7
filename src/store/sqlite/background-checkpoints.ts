/**
 * WAL checkpoints off the event loop. In WAL mode every commit appends the
 * pages it changed to the `-wal` file; a checkpoint copies them back into the
 * database file and syncs it. Left to SQLite, the commit that takes the WAL
 * past 1 000 pages runs the checkpoint itself, synchronously: a few
 * milliseconds to over a hundred, inside some client's request, with every
 * other request waiting behind it. Measured in the growing-conversation
 * bench, those commits were most of the slow turns: 2.4–3.9 ms of `COMMIT`
 * per slow turn against 0.16 ms in the others.
 *
 * Here the server's connection never checkpoints (`wal_autocheckpoint = 0`);
 * a worker thread with its own connection does, a moment after writes were
 * committed. A passive checkpoint neither waits for nor blocks the writer.
 * Under unbroken writing the WAL may never be copied whole (the writer keeps
 * appending), so it could not restart from its beginning and would grow; past
 * WAL_TRUNCATE_BYTES the worker runs a truncating checkpoint, which waits for
 * the writer's transaction in progress, then empties the file.
 *
 * The worker starts with the first checkpoint and stops after
 * CHECKPOINTER_IDLE_MS without one, so an idle server holds no second
 * thread. If it cannot start or a checkpoint fails, the server's connection
 * goes back to checkpointing itself (SQLite's default), and stays so.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { SqliteDatabase } from './open-database.js';

/** How long after a commit the checkpoint runs: commits in between share it. */
export const CHECKPOINT_DELAY_MS = 100;
/** The worker stops after this long without a checkpoint to run. */
export const CHECKPOINTER_IDLE_MS = 30_000;
/** A WAL larger than this after a passive checkpoint is copied whole and emptied. */
export const WAL_TRUNCATE_BYTES = 64 * 1024 * 1024;
/** SQLite's own default, restored when the worker fails. */
export const SQLITE_AUTOCHECKPOINT_PAGES = 1_000;
/** How long the worker's truncating checkpoint waits for the writer. */
const WORKER_BUSY_TIMEOUT_MS = 5_000;

/**
 * The worker's code, as a script (a file would need its own build step: the
 * server runs from dist/, the tests from the TypeScript sources). It answers
 * each 'checkpoint' with `{ ok }` and closes its connection on 'close'.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { statSync } = require('node:fs');
const Database = require(workerData.driver);
let db;
try {
  db = new Database(workerData.path, { fileMustExist: true });
  db.pragma('busy_timeout = ' + workerData.busyTimeoutMs);
  db.pragma('cache_size = -1024');
} catch (err) {
  parentPort.postMessage({ ok: false, error: String(err && err.message) });
}
parentPort.on('message', (message) => {
  if (message === 'close') {
    if (db) db.close();
    parentPort.close();
    return;
  }
  if (!db) return;
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
    let walBytes = 0;
    try { walBytes = statSync(workerData.path + '-wal').size; } catch {}
    if (walBytes > workerData.truncateBytes) db.pragma('wal_checkpoint(TRUNCATE)');
    parentPort.postMessage({ ok: true });
  } catch (err) {
    parentPort.postMessage({ ok: false, error: String(err && err.message) });
  }
});
`;

interface WorkerAnswer {
  ok: boolean;
  error?: string;
}

export interface BackgroundCheckpointOptions {
  /** Told once, when checkpoints fall back to the server's connection. */
  onFallback?: (reason: string) => void;
  /** WAL_TRUNCATE_BYTES unless given (a test empties the WAL after every checkpoint). */
  truncateBytes?: number;
  /** CHECKPOINTER_IDLE_MS unless given. */
  idleMs?: number;
}

export class BackgroundCheckpoints {
  private worker: Worker | undefined;
  private delay: NodeJS.Timeout | undefined;
  private idle: NodeJS.Timeout | undefined;
  /** A checkpoint was sent to the worker and has not been answered. */
  private running = false;
  /** A commit came while a checkpoint ran: another follows it. */
  private again = false;
  private fellBack = false;
  private closed = false;
  /** Waiting for nothing to be scheduled or running (`settled`). */
  private settledWaiters: (() => void)[] = [];

  constructor(
    private readonly db: SqliteDatabase,
    private readonly path: string,
    private readonly options: BackgroundCheckpointOptions = {},
  ) {
    db.pragma('wal_autocheckpoint = 0');
  }

  /** Whether checkpoints still run in the worker (false once fallen back or closed). */
  get active(): boolean {
    return !this.fellBack && !this.closed;
  }

  /** Whether the worker thread is there (it comes with a checkpoint and goes when idle). */
  get workerRunning(): boolean {
    return this.worker !== undefined;
  }

  /** Writes were committed: a checkpoint runs a moment from now. */
  committed(): void {
    if (!this.active) return;
    if (this.running) {
      this.again = true;
      return;
    }
    if (this.delay !== undefined) return;
    this.delay = setTimeout(() => {
      this.delay = undefined;
      this.checkpoint();
    }, CHECKPOINT_DELAY_MS);
    this.delay.unref();
  }

  /** Resolves once no checkpoint is scheduled or running. */
  settled(): Promise<void> {
    if (this.delay === undefined && !this.running) return Promise.resolve();
    return new Promise((resolve) => this.settledWaiters.push(resolve));
  }

  /** Stops the worker (its connection closed); the server's connection checkpoints as it closes. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.delay);
    clearTimeout(this.idle);
    this.delay = undefined;
    this.running = false;
    await this.stopWorker();
    this.notifySettled();
  }

  private checkpoint(): void {
    if (!this.active) return this.notifySettled();
    this.running = true;
    clearTimeout(this.idle);
    this.startedWorker().postMessage('checkpoint');
  }

  private startedWorker(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: {
        driver: createRequire(import.meta.url).resolve('better-sqlite3'),
        path: this.path,
        busyTimeoutMs: WORKER_BUSY_TIMEOUT_MS,
        truncateBytes: this.options.truncateBytes ?? WAL_TRUNCATE_BYTES,
      },
    });
    worker.unref();
    worker.on('message', (answer: WorkerAnswer) => this.answered(answer));
    worker.on('error', (err) => this.fallBack(`the checkpoint worker failed: ${err.message}`));
    worker.on('exit', () => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      if (this.running) this.fallBack('the checkpoint worker exited during a checkpoint');
    });
    this.worker = worker;
    return worker;
  }

  private answered(answer: WorkerAnswer): void {
    // An answer that arrives after close (the checkpoint ran on) changes nothing.
    if (this.closed) return;
    if (!answer.ok) {
      this.fallBack(`a background checkpoint failed: ${answer.error ?? 'unknown error'}`);
      return;
    }
    this.running = false;
    if (this.again) {
      this.again = false;
      this.committed();
    }
    if (this.delay === undefined) {
      const idleMs = this.options.idleMs ?? CHECKPOINTER_IDLE_MS;
      this.idle = setTimeout(() => void this.stopWorker(), idleMs);
      this.idle.unref();
      this.notifySettled();
    }
  }

  /** Checkpoints go back to the server's connection, for good. */
  private fallBack(reason: string): void {
    if (this.fellBack || this.closed) return;
    this.fellBack = true;
    this.running = false;
    clearTimeout(this.delay);
    clearTimeout(this.idle);
    this.delay = undefined;
    if (this.db.open) this.db.pragma(`wal_autocheckpoint = ${SQLITE_AUTOCHECKPOINT_PAGES}`);
    void this.stopWorker();
    this.options.onFallback?.(reason);
    this.notifySettled();
  }

  private async stopWorker(): Promise<void> {
    const worker = this.worker;
    if (!worker) return;
    this.worker = undefined;
    const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()));
    // Held open until the worker has closed its connection, or a process
    // with nothing else to do would exit first, its close never settling.
    worker.ref();
    worker.postMessage('close');
    await exited;
  }

  private notifySettled(): void {
    const waiters = this.settledWaiters;
    this.settledWaiters = [];
    for (const resolve of waiters) resolve();
  }
}
