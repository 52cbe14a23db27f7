/**
 * Postgres stops at the one moment a task's wait for approval is being
 * recorded: its turn has stored the tool call, and the write that moves the
 * task to `waiting` (in the session's slot) is on its way. That write cannot
 * land, and the slot is lost with the database. The task must not stay
 * `running` with nobody to settle it: once the database is back it is
 * `interrupted`, a chat on the session works, and a resume finishes the task
 * without ever running the call nobody approved.
 *
 * The moment is made exact with a trigger on the private cluster that holds
 * the `waiting` update in pg_sleep until the test stops the server.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TaskRow } from '../../src/store/store.js';
import { startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const DELETE_TOOL = `import { appendFileSync } from 'node:fs';
export default {
  name: 'delete_file',
  description: 'Deletes a file.',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  async run(args) {
    appendFileSync(new URL('./calls.log', import.meta.url), args.path + '\\n');
    return 'deleted ' + args.path;
  },
};
`;

describe('a task whose wait for approval meets a database outage', () => {
  let server: PrivatePostgres;
  let t: TestApp;
  beforeAll(async () => {
    server = await startPrivatePostgres();
    t = await startTestApp({
      databaseSettings: { url: server.url, poolSize: 4 },
      agents: {
        guarded: {
          name: 'guarded',
          description: 'Acts only with approval',
          system: 'You delete files when asked.',
          tools: [{ tool: './tools/delete.js', approval: 'required' }],
          maxIterations: 6,
        },
      },
      files: { 'agents/guarded/tools/delete.js': DELETE_TOOL },
    });
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await server?.destroy();
  });

  async function sql<T extends pg.QueryResultRow>(text: string): Promise<T[]> {
    const client = new pg.Client({ connectionString: server.url });
    await client.connect();
    try {
      return (await client.query<T>(text)).rows;
    } finally {
      await client.end();
    }
  }

  async function task(id: string): Promise<TaskRow> {
    const res = await t.app.server.inject({ url: `/tasks/${id}` });
    expect(res.statusCode, res.body).toBe(200);
    return res.json<{ task: TaskRow }>().task;
  }

  function runs(): string[] {
    try {
      return readFileSync(join(t.home, 'agents/guarded/tools/calls.log'), 'utf8')
        .split('\n')
        .filter(Boolean);
    } catch {
      return [];
    }
  }

  it('is interrupted once the database is back, never left running, and resumes without the call', async () => {
    await sql(`CREATE FUNCTION hold_waiting() RETURNS trigger AS $$
      BEGIN PERFORM pg_sleep(120); RETURN NEW; END $$ LANGUAGE plpgsql`);
    await sql(`CREATE TRIGGER hold_waiting BEFORE UPDATE ON tasks FOR EACH ROW
      WHEN (NEW.status = 'waiting') EXECUTE FUNCTION hold_waiting()`);

    t.fake!.script({ tool_calls: [{ name: 'delete_file', arguments: '{"path":"/tmp/x"}' }] });
    const started = await t.app.server.inject({
      method: 'POST',
      url: '/agents/guarded/tasks',
      payload: { input: 'Delete /tmp/x' },
    });
    expect(started.statusCode, started.body).toBe(201);
    const { id, session_id: sessionId } = started.json<{ task: TaskRow }>().task;

    // The wait's write has reached the database and is held there.
    await expect
      .poll(
        async () =>
          (
            await sql<{ n: number }>(`SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE wait_event = 'PgSleep'`)
          )[0]!.n,
        { timeout: 20_000 },
      )
      .toBe(1);
    await server.stop();
    await server.start();

    await expect.poll(async () => (await task(id)).status, { timeout: 30_000 }).toBe('interrupted');
    expect((await task(id)).error).toMatch(/^(DATABASE_UNAVAILABLE|SESSION_LOCK_LOST): /);
    expect(runs()).toEqual([]);

    // The session takes a chat, which answers the call nobody approved as interrupted.
    t.fake!.script({ content: 'Hello again.' });
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/guarded/chat',
      payload: { sessionId, message: 'Are you there?' },
    });
    expect(chat.statusCode, chat.body).toBe(200);

    t.fake!.script({ content: 'Nothing was deleted.' });
    const resumed = await t.app.server.inject({
      method: 'POST',
      url: `/tasks/${id}/resume?wait=true`,
      payload: {},
    });
    expect(resumed.statusCode, resumed.body).toBe(200);
    expect(resumed.json<{ task: TaskRow }>().task).toMatchObject({
      status: 'completed',
      result: 'Nothing was deleted.',
    });
    expect(runs()).toEqual([]);
    const results = (await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 50 })).filter(
      (m) => m.role === 'tool',
    );
    expect(results).toHaveLength(1);
  }, 120_000);
});
