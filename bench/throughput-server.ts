/**
 * One server of the throughput comparison (bench/throughput.ts), in its own
 * process so that neither shares a heap or an event loop with the other or
 * with the load generator:
 *
 *   node dist-bench/bench/throughput-server.js cairn|baseline|minimal <home>
 *
 * Each listens on 127.0.0.1 on a free port, requires the same bearer key,
 * prints `{"port": …}` on one line once listening, and exits on SIGTERM.
 *
 * - `cairn`: the compiled app (dist/, what `npm start` runs) with the shipped
 *   demo agent and no model configured, so its turns use the built-in offline
 *   model (no network). Auth on, logger off, daemons off, call records on (the
 *   default).
 * - `baseline`: a bare fastify 5 + better-sqlite3 server that writes what a
 *   Cairn chat turn writes and nothing else: `POST /agents/:name/chat
 *   {message, sessionId?}`, the body checked by a JSON Schema, the bearer key
 *   compared in constant time; then the user message (seq, chars, token
 *   estimate, transcript hash chain), its `message.created` event and the
 *   session's counters in one `BEGIN IMMEDIATE` transaction (Cairn commits
 *   the user message before it calls the model); then the reply, its event,
 *   the counters, and the model call's record (its row, a delta on the
 *   session's previous call, and a blob for each message of the request new
 *   since that call) in a second; the JSON envelope after the commit. The
 *   reply is computed in place, as long as the offline model's.
 * - `minimal`: the same server writing less: both messages, their events and
 *   the counters in one transaction, no call record. A reference for what the
 *   two commits and the record cost a bare server.
 *
 * Both bare servers open the database with Cairn's own `openDatabase` (dist/),
 * so the schema, indexes, triggers (the history-index queue) and pragmas (WAL,
 * synchronous=NORMAL, foreign keys) are the same. Without a sessionId the
 * route creates the session (row, system message, `session.created` event),
 * as Cairn's does.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import Fastify from 'fastify';
import type * as AppModule from '../src/app.js';
import type * as SettingsModule from '../src/config/settings.js';
import type * as OpenDatabaseModule from '../src/store/sqlite/open-database.js';
import type * as CallRowsModule from '../src/store/model-call-rows.js';
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
  const { startApp } = (await import(new URL('app.js', DIST).href)) as typeof AppModule;
  const { loadSettings } = (await import(
    new URL('config/settings.js', DIST).href
  )) as typeof SettingsModule;
  const app = await startApp(loadSettings({ home, env: {} }), { logger: false, daemons: false });
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

/**
 * The bare server's statements and writes, on Cairn's schema. `sameWrites`
 * adds what a Cairn turn writes beyond its messages: the user message
 * committed on its own before the reply is made (Cairn stores it before the
 * model call), and the model call's record with its request's new message
 * blobs, committed with the reply.
 */
async function startBaseline(home: string, sameWrites: boolean): Promise<Closable> {
  const { openDatabase } = (await import(
    new URL('store/sqlite/open-database.js', DIST).href
  )) as typeof OpenDatabaseModule;
  const { MODEL_CALL_INSERT_COLUMNS } = (await import(
    new URL('store/model-call-rows.js', DIST).href
  )) as typeof CallRowsModule;
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
    insertBlob: db.prepare(
      'INSERT OR IGNORE INTO model_call_blobs (session_id, hash, body) VALUES (?, ?, ?)',
    ),
    insertCall: db.prepare(
      `INSERT INTO model_calls (${MODEL_CALL_INSERT_COLUMNS.join(', ')})
       VALUES (${MODEL_CALL_INSERT_COLUMNS.map(() => '?').join(', ')})`,
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

  type Stored = { session_id: string; seq: number; role: string; content: string };
  /** Messages, their events and the session's counters, inside the caller's transaction. */
  const append = (sessionId: string, messages: [string, string][]): Stored[] | undefined => {
    const state = stmt.appendState.get(sessionId);
    if (!state) return undefined;
    const at = new Date().toISOString();
    const stored = [];
    let head = state.transcript_hash;
    let seq = state.last_seq;
    for (const [role, content] of messages) {
      seq += 1;
      head = nextHash(head, role, content);
      const tokens = tokensOf(content);
      stmt.insertMessage.run(sessionId, seq, role, content, at, content.length, tokens, head);
      stored.push({ session_id: sessionId, seq, role, content, created_at: at, tokens });
    }
    const input = messages.filter(([role]) => role === 'user');
    const output = messages.filter(([role]) => role === 'assistant');
    const tokens = (texts: [string, string][]) =>
      texts.reduce((sum, [, text]) => sum + tokensOf(text), 0);
    stmt.bump.run(messages.length, seq, head, tokens(input), tokens(output), at, sessionId);
    for (const m of stored) {
      const data = JSON.stringify({ seq: m.seq, role: m.role, sessionId });
      stmt.insertEvent.run('message.created', sessionId, data, at);
    }
    return stored;
  };

  /** Per session: the chain the next call continues, as Cairn's recorder keeps it. */
  const chains = new Map<string, { chainId: string; lastCallId: string; refs: string[] }>();
  const blobRef = (body: string) =>
    createHash('sha256').update(body).digest('base64url').slice(0, 16);
  /**
   * The model call's record: the blobs of the request's messages new since
   * the session's previous call (`sent` is every message of the request, as
   * JSON), and its row, a delta on that call.
   */
  const recordCall = (sessionId: string, sent: readonly string[], reply: string): void => {
    const id = `call_${Date.now().toString(36)}${randomBytes(6).toString('hex')}`;
    const previous = chains.get(sessionId);
    const known = previous?.refs.length ?? 0;
    const refs = [...(previous?.refs ?? [])];
    for (const body of sent.slice(known)) {
      const hash = blobRef(body);
      stmt.insertBlob.run(sessionId, hash, body);
      refs.push(hash);
    }
    const paramsRef = blobRef('{"model":"offline","messages":null}');
    if (!previous) stmt.insertBlob.run(sessionId, paramsRef, '{"model":"offline","messages":null}');
    const values: Record<(typeof MODEL_CALL_INSERT_COLUMNS)[number], unknown> = {
      id,
      session_id: sessionId,
      turn_seq: null,
      role: 'main',
      provider: 'offline',
      model: 'offline',
      response_model: 'offline',
      created_at: new Date().toISOString(),
      latency_ms: 0.1,
      input_tokens: 60,
      output_tokens: tokensOf(reply),
      cached_tokens: null,
      cost: null,
      finish_reason: 'stop',
      response: JSON.stringify({ role: 'assistant', content: reply }),
      error_code: null,
      error: null,
      fallback_hops: null,
      recalled_seqs: null,
      wire: 0,
      params_ref: paramsRef,
      chain_id: previous?.chainId ?? id,
      base_call_id: previous?.lastCallId ?? null,
      base_keep: known,
      message_refs: JSON.stringify(refs.slice(known)),
    };
    stmt.insertCall.run(...MODEL_CALL_INSERT_COLUMNS.map((column) => values[column]));
    chains.set(sessionId, { chainId: previous?.chainId ?? id, lastCallId: id, refs });
  };

  const storeMessages = db.transaction(append).immediate.bind(null);
  const storeReply = db
    .transaction((sessionId: string, sent: readonly string[], reply: string) => {
      const stored = append(sessionId, [['assistant', reply]]);
      if (stored) recordCall(sessionId, sent, reply);
      return stored;
    })
    .immediate.bind(null);
  /** Each session's request so far (its messages as JSON), kept in memory. */
  const prompts = new Map<string, string[]>();
  const wire = (role: string, content: string) => JSON.stringify({ role, content });

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
      let stored: Stored[] | undefined;
      if (sameWrites) {
        const input = storeMessages(sessionId, [['user', message]]);
        const sent = prompts.get(sessionId) ?? [wire('system', system)];
        sent.push(wire('user', message));
        const output = input && storeReply(sessionId, sent, text);
        sent.push(wire('assistant', text));
        prompts.set(sessionId, sent);
        stored = input && output && [...input, ...output];
      } else {
        stored = storeMessages(sessionId, [
          ['user', message],
          ['assistant', text],
        ]);
      }
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
if ((mode !== 'cairn' && mode !== 'baseline' && mode !== 'minimal') || home === undefined) {
  throw new Error(
    'usage: node dist-bench/bench/throughput-server.js cairn|baseline|minimal <home>',
  );
}
const server =
  mode === 'cairn' ? await startCairn(home) : await startBaseline(home, mode === 'baseline');
process.stdout.write(`${JSON.stringify({ port: server.port })}\n`);
process.once('SIGTERM', () => {
  void server.close().then(() => process.exit(0));
});
