/**
 * `node dist-bench/bench/fts-insert.js`: the cost of the full-text index per
 * message insert, option by option. Not part of `npm run bench`'s
 * table: it picks the index design once; the choice and its figures are
 * recorded in migration 008 (src/store/migrations/008-*.ts).
 *
 * Each option gets a fresh WAL database file with the real pragmas and the
 * messages table of the app, then TURNS write transactions of two messages
 * (a user question and a reply, what a chat turn commits) into one session
 * that already holds PREFILL messages. Reported: inserts per second, the
 * file size, and whether `history_search`'s query (each word a quoted phrase,
 * OR-ed, bm25 rank, snippet) finds the expected rows and snippets.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';

const PREFILL = Number(process.env.FTS_PREFILL ?? 20_000);
const TURNS = Number(process.env.FTS_TURNS ?? 2_000);

const WORDS =
  'the of and to in is that for it as with was on be by this are or from at have an not which but all were when we there can more if will one about so out up what some time their would other into has two like could them these than then now its only also over after first well way even new want because any give day most us'.split(
    ' ',
  );

/** Deterministic pseudo-random prose, with a rare marker word now and then. */
function makeText(i: number, words: number): string {
  let x = (i * 2654435761) >>> 0;
  const out: string[] = [];
  for (let w = 0; w < words; w++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out.push(WORDS[x % WORDS.length]!);
  }
  if (i % 500 === 0) out.push(`zebra${i}`, 'Ünïcödé_token');
  return out.join(' ');
}

interface Option {
  name: string;
  /** Creates the index (and its triggers) after `messages` exists. */
  schema: string;
  /** The search statement, same shape as the store's. */
  search: string;
  /** Work to do after the inserts before searching (a deferred batch). */
  catchUp?: string;
  /** Statements run per write transaction besides the inserts. */
  perTurn?: string;
}

const MESSAGES = `CREATE TABLE sessions (id TEXT PRIMARY KEY);
CREATE TABLE messages (
  id INTEGER PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT, created_at TEXT NOT NULL,
  UNIQUE (session_id, seq));`;

const triggers = (table: string): string => `
CREATE TRIGGER ${table}_insert AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
  INSERT INTO ${table} (rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER ${table}_delete AFTER DELETE ON messages WHEN old.content IS NOT NULL BEGIN
  INSERT INTO ${table} (${table}, rowid, content) VALUES ('delete', old.id, old.content);
END;`;

const searchOn = (table: string): string => `SELECT m.seq AS seq,
  snippet(${table}, 0, '[', ']', '…', 16) AS snippet
  FROM ${table} JOIN messages m ON m.id = ${table}.rowid
  WHERE ${table} MATCH ? AND m.session_id = ? ORDER BY rank LIMIT 10`;

const OPTIONS: Option[] = [
  { name: 'no index (floor)', schema: '', search: '' },
  {
    name: 'external content, detail=full, unicode61 (001)',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id');${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'external content, detail=column',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id', detail=column);${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'external content, detail=none',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id', detail=none);${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'external content, detail=full, ascii tokenizer',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id', tokenize='ascii');${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'external content, detail=full, automerge=2',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id');
      INSERT INTO fts (fts, rank) VALUES ('automerge', 2);${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'external content, detail=full, automerge=16',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id');
      INSERT INTO fts (fts, rank) VALUES ('automerge', 16);${triggers('fts')}`,
    search: searchOn('fts'),
  },
  {
    name: 'deferred batch: trigger queues the id, a batch indexes the queue',
    schema: `CREATE VIRTUAL TABLE fts USING fts5 (content, content='messages', content_rowid='id');
      CREATE TABLE fts_pending (id INTEGER PRIMARY KEY);
      CREATE TRIGGER fts_queue AFTER INSERT ON messages WHEN new.content IS NOT NULL BEGIN
        INSERT INTO fts_pending (id) VALUES (new.id);
      END;`,
    catchUp: `INSERT INTO fts (rowid, content) SELECT m.id, m.content FROM messages m
        WHERE m.id IN (SELECT id FROM fts_pending);
      DELETE FROM fts_pending;`,
    search: searchOn('fts'),
  },
];

function ftsQuery(text: string): string {
  return (text.match(/[\p{L}\p{N}_]+/gu) ?? []).map((w) => `"${w}"`).join(' OR ');
}

interface Result {
  name: string;
  insertsPerSecond: number;
  p99TurnMs: number;
  fileMb: number;
  search: string;
}

function run(option: Option, dir: string): Result {
  const file = join(dir, `${option.name.replace(/\W+/g, '-')}.db`);
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(MESSAGES);
  db.exec(option.schema);
  db.prepare('INSERT INTO sessions (id) VALUES (?)').run('s');
  const insert = db.prepare(
    "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES ('s', ?, ?, ?, '2026-01-01')",
  );
  const prefill = db.transaction(() => {
    for (let i = 1; i <= PREFILL; i++) insert.run(i, 'user', makeText(i, 40));
  });
  prefill();
  if (option.catchUp) db.exec(option.catchUp);
  let seq = PREFILL;
  const turn = db.transaction(() => {
    insert.run(++seq, 'user', makeText(seq, 15));
    insert.run(++seq, 'assistant', makeText(seq, 60));
  });
  const times: number[] = [];
  const started = performance.now();
  for (let t = 0; t < TURNS; t++) {
    const at = performance.now();
    turn.immediate();
    times.push(performance.now() - at);
  }
  const elapsed = performance.now() - started;
  times.sort((a, b) => a - b);
  let search = '—';
  if (option.search) {
    const catchUpStarted = performance.now();
    if (option.catchUp) db.exec(option.catchUp);
    const catchUpMs = performance.now() - catchUpStarted;
    try {
      const statement = db.prepare(option.search);
      const marker = `zebra${PREFILL + 500 - (PREFILL % 500)}`;
      const hits = statement.all(ftsQuery(marker), 's') as { seq: number; snippet: string }[];
      const unicode = statement.all(ftsQuery('Ünïcödé_token'), 's');
      const ok = hits.length === 1 && hits[0]!.snippet.includes(`[${marker}]`);
      search = `${ok ? 'ok' : 'WRONG'} (marker ${hits.length} hit, unicode ${unicode.length} hits${
        option.catchUp ? `, catch-up ${catchUpMs.toFixed(0)} ms` : ''
      })`;
    } catch (err) {
      search = `FAILS: ${(err as Error).message}`;
    }
  }
  db.close();
  return {
    name: option.name,
    insertsPerSecond: (TURNS * 2) / (elapsed / 1000),
    p99TurnMs: times[Math.floor(times.length * 0.99)]!,
    fileMb: statSync(file).size / 1024 / 1024,
    search,
  };
}

const dir = mkdtempSync(join(tmpdir(), 'cairn-fts-bench-'));
try {
  console.log(`FTS options: ${PREFILL} messages prefilled, ${TURNS} turns of 2 inserts each`);
  console.log('| option | inserts/s | p99 turn | file | history_search |');
  console.log('|---|---|---|---|---|');
  for (const option of OPTIONS) {
    const r = run(option, dir);
    console.log(
      `| ${r.name} | ${r.insertsPerSecond.toFixed(0)} | ${r.p99TurnMs.toFixed(2)} ms | ${r.fileMb.toFixed(1)} MB | ${r.search} |`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
