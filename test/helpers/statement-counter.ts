/**
 * Counts the SQL statements a piece of work sends, for real: every
 * `pg.Client#query` (the pool's connections and the dedicated lock and
 * event connections are all `pg.Client`s, so BEGIN, COMMIT and the session
 * lock count) and every better-sqlite3 statement execution (`run`, `get`,
 * `all`, `iterate` — the BEGIN IMMEDIATE and COMMIT of a transaction are
 * statements run that way too). A statement counts for the work it was
 * issued from (its async context), so the event feed's reads and the
 * heartbeat of the same process, which run on their own timers, are not
 * a turn's statements. Used by the statement-count test and by the bench.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import Database from 'better-sqlite3';
import pg from 'pg';

export interface StatementCount {
  postgres: number;
  sqlite: number;
}

type Method = (this: unknown, ...args: unknown[]) => unknown;

const SQLITE_METHODS = ['run', 'get', 'all', 'iterate'] as const;

export class StatementCounter {
  private readonly scope = new AsyncLocalStorage<StatementCount>();
  private readonly restore: (() => void)[] = [];

  /** Patches the pg client and the better-sqlite3 statement; `uninstall` undoes it. */
  static install(): StatementCounter {
    const counter = new StatementCounter();
    counter.wrap(pg.Client.prototype as unknown as Record<string, unknown>, 'query', 'postgres');
    const probe = new Database(':memory:');
    const statement = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Record<string, unknown>;
    probe.close();
    for (const method of SQLITE_METHODS) counter.wrap(statement, method, 'sqlite');
    return counter;
  }

  /** Runs `work` and returns what it returned with the statements it sent. */
  async count<T>(work: () => Promise<T>): Promise<{ result: T; statements: StatementCount }> {
    const statements: StatementCount = { postgres: 0, sqlite: 0 };
    const result = await this.scope.run(statements, work);
    return { result, statements };
  }

  uninstall(): void {
    for (const undo of this.restore.splice(0).reverse()) undo();
  }

  private wrap(target: Record<string, unknown>, name: string, dialect: keyof StatementCount): void {
    const original = target[name] as Method;
    const scope = this.scope;
    target[name] = function counted(this: unknown, ...args: unknown[]): unknown {
      const counting = scope.getStore();
      if (counting) counting[dialect] += 1;
      return original.apply(this, args);
    };
    this.restore.push(() => {
      target[name] = original;
    });
  }
}
