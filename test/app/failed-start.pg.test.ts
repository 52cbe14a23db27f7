/**
 * The composition root builds, then starts; a step of either that fails
 * closes what the steps before it opened. Each step is made to throw in turn
 * (`AppOptions.beforeStep`), on SQLite and on Postgres, and afterwards the
 * process holds what it held before: no socket, timer or watcher left
 * running, no file descriptor on the database file, no connection to the
 * Postgres database.
 */
import { readdirSync, readlinkSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_STEPS, startApp, type AppStep } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import { createTestDatabase } from '../helpers/postgres.js';
import { makeHome, TEST_AGENT } from '../helpers/test-app.js';

/** The kinds of what keeps the process busy, sorted: sockets, timers, watchers… */
function activeResources(): string[] {
  return process.getActiveResourcesInfo().sort();
}

/** Open file descriptors of this process on files whose path contains `part`. */
function descriptorsOn(part: string): string[] {
  const found: string[] = [];
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.includes(part)) found.push(target);
    } catch {
      // Closed while we looked.
    }
  }
  return found;
}

class StepFailed extends Error {}

describe('a build or start that fails at a step', () => {
  describe('on SQLite', () => {
    it.each(APP_STEPS)('closes everything opened before "%s"', async (failing: AppStep) => {
      const home = makeHome({ agents: { assistant: TEST_AGENT } }, null);
      const before = activeResources();
      await expect(
        startApp(loadSettings({ home, env: {} }), {
          logger: false,
          daemons: true,
          watchAgents: true,
          beforeStep: (step) => {
            if (step === failing) throw new StepFailed(`failed at ${step}`);
          },
        }),
      ).rejects.toBeInstanceOf(StepFailed);
      expect(descriptorsOn(home)).toEqual([]);
      await expect.poll(activeResources).toEqual(before);
    });
  });

  describe('on Postgres', () => {
    let database: Awaited<ReturnType<typeof createTestDatabase>>;
    beforeAll(async () => {
      database = await createTestDatabase();
    });
    afterAll(async () => database?.drop());

    /** Connections to the test database other than the one asking. */
    async function connections(): Promise<number> {
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_stat_activity
           WHERE datname = current_database() AND pid <> pg_backend_pid()`,
        );
        return rows[0]!.n;
      } finally {
        await client.end();
      }
    }

    it.each(APP_STEPS)('closes everything opened before "%s"', async (failing: AppStep) => {
      const home = makeHome({ agents: { assistant: TEST_AGENT } }, null, database.url);
      const before = activeResources();
      await expect(
        startApp(loadSettings({ home, env: {} }), {
          logger: false,
          daemons: true,
          watchAgents: true,
          beforeStep: (step) => {
            if (step === failing) throw new StepFailed(`failed at ${step}`);
          },
        }),
      ).rejects.toBeInstanceOf(StepFailed);
      await expect.poll(connections).toBe(0);
      await expect.poll(activeResources).toEqual(before);
    });
  });
});
