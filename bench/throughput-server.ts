/**
 * One server of the throughput comparison (bench/throughput.ts), in its own
 * process so that neither shares a heap or an event loop with the other or
 * with the load generator:
 *
 *   node dist-bench/bench/throughput-server.js cairn <home>
 *   node dist-bench/bench/throughput-server.js baseline <home>
 *
 * Both listen on 127.0.0.1 on a free port, require the same bearer key, print
 * `{"port": …}` on one line once listening, and exit on SIGTERM.
 *
 * - `cairn`: the compiled app (dist/, what `npm start` runs) with the shipped
 *   demo agent and no model configured, so its turns use the built-in offline
 *   model (no network). Auth on, logger off, daemons off.
 * - `baseline`: a bare fastify 5 + better-sqlite3 server that does what a
 *   Cairn chat turn writes and nothing else: `POST /agents/:name/chat
 *   {message, sessionId?}`, the body checked by a JSON Schema, the bearer key
 *   compared in constant time, then one `BEGIN IMMEDIATE` transaction that
 *   reads the session's counters, inserts the user message and the reply
 *   (seq, chars, token estimate, transcript hash chain), adds both to the
 *   session row, and inserts a `message.created` event for each, and the
 *   JSON envelope back after the commit. The database is opened by Cairn's
 *   own `openDatabase` (dist/), so the schema, indexes, triggers (the
 *   history-index queue) and pragmas (WAL, synchronous=NORMAL, foreign keys)
 *   are the same. The reply is computed in place, as long as the offline
 *   model's. Without a sessionId the route creates the session (row, system
 *   message, `session.created` event), as Cairn's does.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import Fastify from 'fastify';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';
import type * as OpenDatabaseModule from '../src/store/sqlite/open-database.js';
import { THROUGHPUT_API_KEY } from './throughput.js';

const DIST = new URL('../../dist/', import.meta.url);
const DEMO_AGENT = new URL('../../agents/assistant/agent.json', import.meta.url);
const DATABASE = 'data/cairn.db';

interface Closable {
  port: number;
  close: () => Promise<void>;
}

async function startCairn(home: string): Promise<Closable> {
  mkdirSync(join(home, 'agents/assistant'), { recursive: true });
  copyFileSync(DEMO_AGENT, join(home, 'agents/assistant/agent.json'));
  writeFileSync(
    join(home, 'cairn.json'),
    JSON.stringify({ server: { apiKey: THROUGHPUT_API_KEY }, database: { path: DATABASE } }),
  );
  const { buildApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
  const { loadSettings } = (await import(
    new URL('config/settings.js', DIST).href
  )) as typeof SettingsModule;
  const app = await buildApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
  await app.server.listen({ host: '127.0.0.1', port: 0 });
  return { port: (app.server.server.address() as AddressInfo).port, close: () => app.close() };
}

interface AppendState {
  last_seq: number;
  transcript_hash: string | null;
}

/** The transcript chain Cairn keeps per visible message (sha256 over the previous link). */
function nextHash(previous: string | null, role: string, content: string): string {
  return createHash('sha256')
    .update(JSON.stringify([previous ?? '', role, content]))
    .digest('base64url');
}

const tokensOf = (text: string): number => 4 + Math.ceil(text.length / 4);

async function startBaseline(home: string): Promise<Closable> {
  const { openDatabase } = (await import(
    new URL('store/sqlite/open-database.js', DIST).href
  )) as typeof OpenDatabaseModule;
  const db = openDatabase(join(home, DATABASE));
  const system = 'You are a helpful assistant.';
  const stmt = {
    insertSession: db.prepare(`INSERT INTO sessions
      (id, agent_name, mode, status, created_at, updated_at, compact_count)
      VALUES (?, ?, 'chat', 'active', ?, ?, 50)`),
    appendState: db.prepare<[string], AppendState>(
      'SELECT last_seq, transcript_hash FROM sessions WHERE id = ?',
    ),
    insertMessage: db.prepare(`INSERT INTO messages
      (session_id, seq, role, content, created_at, chars, tokens, transcript_hash)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
    bump: db.prepare(`UPDATE sessions SET message_count = message_count + ?, last_seq = ?,
      transcript_hash = ?, input_tokens = input_tokens + ?, output_tokens = output_tokens + ?,
      updated_at = ? WHERE id = ?`),
    insertEvent: db.prepare(
      'INSERT INTO events (type, session_id, data, created_at) VALUES (?, ?, ?, ?)',
    ),
  };
  const createSession = db
    .transaction((agent: string): string => {
      const id = `sess_${randomBytes(12).toString('hex')}`;
      const at = new Date().toISOString();
      stmt.insertSession.run(id, agent, at, at);
      stmt.insertMessage.run(id, 1, 'system', system, at, system.length, tokensOf(system), null);
      stmt.bump.run(1, 1, null, 0, 0, at, id);
      stmt.insertEvent.run('session.created', id, JSON.stringify({ agentName: agent }), at);
      return id;
    })
    .immediate.bind(null);
  const appendTurn = db
    .transaction((sessionId: string, message: string, reply: string) => {
      const state = stmt.appendState.get(sessionId);
      if (!state) return undefined;
      const at = new Date().toISOString();
      const stored = [];
      let head = state.transcript_hash;
      let seq = state.last_seq;
      for (const [role, content] of [
        ['user', message],
        ['assistant', reply],
      ] as const) {
        seq += 1;
        head = nextHash(head, role, content);
        const tokens = tokensOf(content);
        stmt.insertMessage.run(sessionId, seq, role, content, at, content.length, tokens, head);
        stored.push({ session_id: sessionId, seq, role, content, created_at: at, tokens });
      }
      stmt.bump.run(2, seq, head, tokensOf(message), tokensOf(reply), at, sessionId);
      for (const m of stored) {
        const data = JSON.stringify({ seq: m.seq, role: m.role, sessionId });
        stmt.insertEvent.run('message.created', sessionId, data, at);
      }
      return stored;
    })
    .immediate.bind(null);

  const app = Fastify({ logger: false });
  const expected = Buffer.from(`Bearer ${THROUGHPUT_API_KEY}`);
  app.addHook('onRequest', async (request, reply) => {
    const given = Buffer.from(request.headers.authorization ?? '');
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      return reply.code(401).send({ error: { code: 'UNAUTHORIZED' } });
    }
  });
  app.post<{ Params: { name: string }; Body: { message: string; sessionId?: string } }>(
    '/agents/:name/chat',
    {
      schema: {
        params: {
          type: 'object',
          properties: { name: { type: 'string', pattern: '^[a-z0-9][a-z0-9-]*$' } },
          required: ['name'],
        },
        body: {
          type: 'object',
          additionalProperties: false,
          required: ['message'],
          properties: {
            message: { type: 'string', minLength: 1, maxLength: 1_000_000, pattern: '\\S' },
            sessionId: { type: 'string', pattern: '^sess_[A-Za-z0-9]{1,64}$' },
          },
        },
      },
    },
    async (request, reply) => {
      const { message } = request.body;
      const sessionId = request.body.sessionId ?? createSession(request.params.name);
      // As long as the offline model's canned reply, computed in place.
      const text = `You said: "${message.slice(0, 80)}". ${'This is a canned reply. '.repeat(10)}`;
      const stored = appendTurn(sessionId, message, text);
      if (!stored) return reply.code(404).send({ error: { code: 'NOT_FOUND' } });
      return {
        sessionId,
        reply: text,
        messages: stored,
        usage: { input_tokens: 60, output_tokens: tokensOf(text), cost: null },
        compaction: null,
        recall: null,
      };
    },
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  return {
    port: (app.server.address() as AddressInfo).port,
    close: async () => {
      await app.close();
      db.close();
    },
  };
}

const [mode, home] = process.argv.slice(2);
if ((mode !== 'cairn' && mode !== 'baseline') || home === undefined) {
  throw new Error('usage: node dist-bench/bench/throughput-server.js cairn|baseline <home>');
}
const server = mode === 'cairn' ? await startCairn(home) : await startBaseline(home);
process.stdout.write(`${JSON.stringify({ port: server.port })}\n`);
process.once('SIGTERM', () => {
  void server.close().then(() => process.exit(0));
});
