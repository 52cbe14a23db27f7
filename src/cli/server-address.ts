/**
 * The address a running `cairn serve` records in its home, so client commands
 * started in that home (`cairn chat`, `sessions`, `compact`, …) reach it even
 * when it was started on another port (`CAIRN_PORT=6051 cairn serve`, `serve
 * --port`) than cairn.json names. The record is one small JSON file holding
 * the URL and the server's pid: written once the port is bound, removed by a
 * clean stop, and ignored by clients when its process is gone (a crash or
 * `kill -9` leaves it behind; the next `serve` overwrites it).
 */
import { readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The record's file name, in the home folder. */
export const SERVER_ADDRESS_FILE = '.cairn-server.json';

export interface ServerAddress {
  /** The base URL clients use, e.g. `http://127.0.0.1:6051`. */
  readonly url: string;
  /** The process of the server that wrote it. */
  readonly pid: number;
  readonly startedAt: string;
}

/** The record's path in `home`. */
export function serverAddressPath(home: string): string {
  return join(home, SERVER_ADDRESS_FILE);
}

/**
 * Where a client on this machine reaches a server bound to `host` and `port`:
 * a wildcard address (`0.0.0.0`, `::`) is reached through loopback.
 */
export function localUrlOf(host: string, port: number): string {
  const reachable = host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
  const bracketed = reachable.includes(':') && !reachable.startsWith('[');
  return `http://${bracketed ? `[${reachable}]` : reachable}:${port}`;
}

/**
 * Writes this process's record (atomically: a reader never sees half a file).
 * Returns what removes it again, only while it is still this process's.
 */
export function recordServerAddress(home: string, url: string): () => void {
  const path = serverAddressPath(home);
  const record: ServerAddress = { url, pid: process.pid, startedAt: new Date().toISOString() };
  const staging = `${path}.${process.pid}.tmp`;
  writeFileSync(staging, `${JSON.stringify(record)}\n`);
  renameSync(staging, path);
  return () => {
    // Another server started in this home since: the record is its now.
    if (readRecord(path)?.pid === process.pid) rmSync(path, { force: true });
  };
}

/** The record of a server still running in `home`, or undefined (none, unreadable, or its process gone). */
export function findServerAddress(home: string): ServerAddress | undefined {
  const record = readRecord(serverAddressPath(home));
  return record !== undefined && isAlive(record.pid) ? record : undefined;
}

function readRecord(path: string): ServerAddress | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return undefined;
  }
  const record = parsed as Partial<ServerAddress> | null;
  if (
    typeof record?.url !== 'string' ||
    !/^https?:\/\//.test(record.url) ||
    !Number.isInteger(record.pid) ||
    (record.pid as number) <= 0
  )
    return undefined;
  return record as ServerAddress;
}

/** Signal 0 checks that a process exists without touching it; EPERM means it exists as another user's. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
