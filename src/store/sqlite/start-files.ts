/**
 * The files a server start creates beside a SQLite database — the database
 * itself with its WAL, shared-memory and journal files, the process lock with
 * its journal, and the folder holding them — noted before the start, so that a
 * start that fails takes away exactly what it created. A database that existed
 * before is never touched, nor anything of its own.
 */
import { existsSync, readdirSync, rmdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { lockPathOf } from './process-lock.js';

export class StartFiles {
  private constructor(
    private readonly created: readonly string[],
    private readonly folder: string | undefined,
  ) {}

  /** Notes which of the start's files do not exist yet (`:memory:` has none). */
  static before(databasePath: string): StartFiles {
    if (databasePath === ':memory:') return new StartFiles([], undefined);
    const lock = lockPathOf(databasePath);
    const lockFiles = [lock, `${lock}-journal`, `${lock}-wal`, `${lock}-shm`];
    const databaseFiles = existsSync(databasePath)
      ? []
      : ['', '-wal', '-shm', '-journal'].map((suffix) => `${databasePath}${suffix}`);
    const candidates = [...databaseFiles, ...lockFiles].filter((file) => !existsSync(file));
    const folder = dirname(databasePath);
    return new StartFiles(candidates, existsSync(folder) ? undefined : folder);
  }

  /** After a failed start, once the database and the lock are closed: removes what the start created. */
  removeCreated(): void {
    for (const file of this.created) rmSync(file, { force: true });
    if (
      this.folder !== undefined &&
      existsSync(this.folder) &&
      readdirSync(this.folder).length === 0
    )
      rmdirSync(this.folder);
  }
}
