/**
 * `cairn eval recall`: measures automatic recall from outside, the way any
 * benchmark of long conversations can be run against Cairn. Each
 * conversation of a data file is seeded as one session (the speaker named
 * `user` as user messages, the others as assistant messages, each stored as
 * `[time] speaker: text`), compacted until the given share of it is behind
 * the pointer, and each question is asked in a fork of it through the chat
 * route. A question is found when a message holding one of its evidence
 * turns is in the chat response's `recall.seqs`, or still in the raw tail.
 * Reported per category: found (any / all evidence), items per question
 * (`recall.seqs.length`, neighbours included), tokens added, time per call.
 *
 * With an `embed` role, every question is asked twice on the same seeded
 * session, once with the agent's recall set to `lexical` and once to
 * `hybrid`, after the background walk's own code has embedded every seeded
 * message (the walk is stopped first, so what is embedded when is the
 * eval's to say): the two tables side by side are the measure of what the
 * vectors add.
 */
import type { AgentConfig } from '../agents/agent-config.js';
import type { CairnApp } from '../app.js';
import { EXPORT_FORMAT, EXPORT_VERSION } from '../transfer/session-export.js';

export interface RecallTurn {
  id: string;
  speaker: string;
  time: string;
  text: string;
}

export interface RecallQuestion {
  question: string;
  evidence: string[];
  category: string;
}

export interface RecallConversation {
  id: string;
  user: string;
  turns: RecallTurn[];
  questions: RecallQuestion[];
}

export interface RecallData {
  conversations: RecallConversation[];
}

/** A data file that does not have the documented shape; the message names the place. */
export class RecallDataError extends Error {}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function text(value: unknown, at: string): string {
  if (typeof value !== 'string') throw new RecallDataError(`${at} must be a string.`);
  return value;
}

function list(value: unknown, at: string): unknown[] {
  if (!Array.isArray(value)) throw new RecallDataError(`${at} must be an array.`);
  return value;
}

function parseTurn(value: unknown, at: string): RecallTurn {
  if (!isObject(value)) throw new RecallDataError(`${at} must be an object.`);
  return {
    id: text(value.id, `${at}.id`),
    speaker: text(value.speaker, `${at}.speaker`),
    time: text(value.time ?? '', `${at}.time`),
    text: text(value.text, `${at}.text`),
  };
}

function parseQuestion(value: unknown, at: string, turnIds: ReadonlySet<string>): RecallQuestion {
  if (!isObject(value)) throw new RecallDataError(`${at} must be an object.`);
  const evidence = list(value.evidence, `${at}.evidence`).map((id, i) =>
    text(id, `${at}.evidence[${i}]`),
  );
  for (const id of evidence) {
    if (!turnIds.has(id)) throw new RecallDataError(`${at}.evidence names no turn "${id}".`);
  }
  // Benchmarks number their categories; a number is read as its name.
  const category = typeof value.category === 'number' ? String(value.category) : value.category;
  return {
    question: text(value.question, `${at}.question`),
    evidence,
    category: text(category ?? 'all', `${at}.category`),
  };
}

/** The data file's content, checked: every turn and question has its fields, every evidence id names a turn. */
export function parseRecallData(json: unknown): RecallData {
  if (!isObject(json))
    throw new RecallDataError('The data must be an object with "conversations".');
  const conversations = list(json.conversations, 'conversations').map((value, c) => {
    const at = `conversations[${c}]`;
    if (!isObject(value)) throw new RecallDataError(`${at} must be an object.`);
    const turns = list(value.turns, `${at}.turns`).map((turn, t) =>
      parseTurn(turn, `${at}.turns[${t}]`),
    );
    if (turns.length === 0) throw new RecallDataError(`${at}.turns is empty.`);
    const ids = new Set(turns.map((turn) => turn.id));
    if (ids.size !== turns.length) throw new RecallDataError(`${at}.turns repeat an id.`);
    return {
      id: text(value.id ?? String(c + 1), `${at}.id`),
      user: text(value.user, `${at}.user`),
      turns,
      questions: list(value.questions, `${at}.questions`).map((q, i) =>
        parseQuestion(q, `${at}.questions[${i}]`, ids),
      ),
    };
  });
  if (conversations.length === 0) throw new RecallDataError('"conversations" is empty.');
  return { conversations };
}

/** How one turn is stored: `[time] speaker: text` (no time, no brackets). */
export function storedText(turn: RecallTurn): string {
  return `${turn.time === '' ? '' : `[${turn.time}] `}${turn.speaker}: ${turn.text}`;
}

export interface RecallCategoryReport {
  category: string;
  questions: number;
  foundAny: number;
  foundAll: number;
  /** Mean `recall.seqs.length` a question. */
  itemsPerQuestion: number;
  /** Mean tokens of the recalled block a question. */
  tokensAdded: number;
  /** Median milliseconds of one chat call (the whole turn, recall included). */
  msPerCall: number;
}

/** The questions' results in one recall mode. */
export interface RecallModeReport {
  categories: RecallCategoryReport[];
  total: RecallCategoryReport;
}

/** The embed role hybrid recall ran with, and what embedding the seeded messages took. */
export interface RecallEmbedReport {
  provider: string;
  model: string;
  /** Null: the model's own. */
  dimensions: number | null;
  /** Messages embedded before the questions (seeded turns and compaction summaries). */
  messages: number;
  /** Wall time of that embedding, in seconds. */
  seconds: number;
}

export interface RecallEvalReport extends RecallModeReport {
  agent: string;
  model: string;
  /** The share asked for behind the pointer, and the share reached (mean over conversations). */
  compacted: { asked: number; reached: number };
  conversations: number;
  /** Questions left out: no evidence to find. */
  skipped: number;
  /** The embed role, or null when there is none (then only lexical recall is measured). */
  embed: RecallEmbedReport | null;
  /** `categories` and `total` are lexical recall's; this is hybrid recall's, on the same questions. */
  hybrid: RecallModeReport | null;
}

export type RecallMode = 'lexical' | 'hybrid';

export interface RecallEvalInput {
  app: CairnApp;
  agentName: string;
  data: RecallData;
  /** Share (0–1) of each conversation to put behind the compaction pointer. */
  compacted: number;
  onProgress?: (done: number, total: number) => void;
}

interface Asked {
  mode: RecallMode;
  category: string;
  foundAny: boolean;
  foundAll: boolean;
  items: number;
  tokens: number;
  ms: number;
}

interface ChatReply {
  recall: { seqs: number[]; tokens: number } | null;
}

/** Compactions tried at most per conversation before the share counts as reached. */
const MAX_COMPACTIONS = 12;

async function inject(
  app: CairnApp,
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  url: string,
  payload?: Record<string, unknown>,
): Promise<unknown> {
  const res = await app.server.inject({ method, url, ...(payload ? { payload } : {}) });
  if (res.statusCode >= 300) throw new Error(`${method} ${url} failed: ${res.body}`);
  return res.statusCode === 204 ? undefined : res.json();
}

/** A turn's time in milliseconds: ISO, a date with or without a time, or "1:56 pm on 8 May, 2023". */
function timeOf(text: string): number {
  const at = Date.parse(text);
  if (!Number.isNaN(at)) return at;
  const onDate = /^(.+?) on (.+)$/.exec(text.trim());
  return onDate ? Date.parse(`${onDate[2]} ${onDate[1]}`) : Number.NaN;
}

/**
 * Each turn's time as an ISO timestamp: its own when it reads as one
 * (timeOf), else the turn's before it (the first turn's: `fallback`).
 */
export function turnTimes(turns: readonly RecallTurn[], fallback: string): string[] {
  let last = fallback;
  return turns.map((turn) => {
    const at = timeOf(turn.time);
    if (!Number.isNaN(at)) last = new Date(at).toISOString();
    return last;
  });
}

/** The session seeded with the conversation, compacted to `share`; its turns' seqs and the share reached. */
async function seed(
  input: RecallEvalInput,
  conversation: RecallConversation,
): Promise<{ sessionId: string; seqOf: Map<string, number>; reached: number }> {
  const { app } = input;
  const compactCount = Math.min(99, Math.max(1, Math.round(input.compacted * 100)));
  // Imported (the route `cairn sessions import` uses), so that each message
  // is dated at its turn's time, as a live conversation's would be.
  const now = new Date().toISOString();
  const times = turnTimes(conversation.turns, now);
  const lines = [
    {
      type: 'session',
      format: EXPORT_FORMAT,
      version: EXPORT_VERSION,
      session: {
        agent_name: input.agentName,
        mode: 'chat',
        status: 'active',
        created_at: times[0] ?? now,
        updated_at: times.at(-1) ?? now,
        compact_count: compactCount,
      },
    },
    ...conversation.turns.map((turn, i) => ({
      type: 'message',
      message: {
        seq: i + 1,
        role: turn.speaker === conversation.user ? 'user' : 'assistant',
        content: storedText(turn),
        created_at: times[i],
      },
    })),
  ];
  const res = await app.server.inject({
    method: 'POST',
    url: '/sessions/import',
    headers: { 'content-type': 'application/x-ndjson' },
    payload: lines.map((line) => JSON.stringify(line)).join('\n'),
  });
  if (res.statusCode >= 300) throw new Error(`POST /sessions/import failed: ${res.body}`);
  const sessionId = res.json<{ session: { id: string } }>().session.id;
  const seqOf = new Map(conversation.turns.map((turn, i) => [turn.id, i + 1]));
  const first = 1;
  const last = conversation.turns.length;
  const share = async (): Promise<number> => {
    const session = await app.store.findSession(sessionId);
    return Math.max(0, (session?.compact_seq ?? 0) - first + 1) / (last - first + 1);
  };
  for (let i = 0; i < MAX_COMPACTIONS; i++) {
    const reached = await share();
    if (reached >= input.compacted) break;
    // A compaction folds compactCount percent of what is not yet compacted,
    // its cut moved to a turn's start: the first often stops just short of
    // the share (89.3 % for 90), and another at the same count would fold 90 %
    // of the rest (99 %). Each later one folds only what is still missing.
    if (i > 0) {
      const missing = (input.compacted - reached) / (1 - reached);
      await inject(app, 'PATCH', `/sessions/${sessionId}`, {
        compactCount: Math.min(99, Math.max(1, Math.ceil(missing * 100))),
      });
    }
    const done = (await inject(app, 'POST', `/sessions/${sessionId}/compact`)) as {
      alreadyUpToDate?: boolean;
    };
    if (done.alreadyUpToDate === true) break;
  }
  return { sessionId, seqOf, reached: await share() };
}

/**
 * The app's agents with `agentName`'s recall set to `mode`: the registry's
 * own swap (what a live reload does), so the chat route runs the agent as
 * configured but for the mode.
 */
function useMode(app: CairnApp, agents: readonly AgentConfig[], name: string, mode: RecallMode) {
  app.agents.replace(
    agents.map((agent) =>
      agent.name !== name
        ? agent
        : {
            ...agent,
            defaultCompaction: {
              ...agent.defaultCompaction,
              recall: { ...agent.defaultCompaction.recall, mode },
            },
          },
    ),
  );
}

async function ask(
  input: RecallEvalInput,
  mode: RecallMode,
  sessionId: string,
  seqOf: ReadonlyMap<string, number>,
  question: RecallQuestion,
): Promise<Asked> {
  const { app } = input;
  const fork = (await inject(app, 'POST', `/sessions/${sessionId}/fork`)) as {
    session: { id: string; compact_seq: number };
  };
  const started = performance.now();
  const reply = (await inject(app, 'POST', `/agents/${input.agentName}/chat`, {
    message: question.question,
    sessionId: fork.session.id,
  })) as ChatReply;
  const ms = performance.now() - started;
  await inject(app, 'DELETE', `/sessions/${fork.session.id}`);
  const recalled = new Set(reply.recall?.seqs ?? []);
  const pointer = fork.session.compact_seq;
  const found = question.evidence.map((id) => {
    const seq = seqOf.get(id)!;
    return seq > pointer || recalled.has(seq);
  });
  return {
    mode,
    category: question.category,
    foundAny: found.some(Boolean),
    foundAll: found.every(Boolean),
    items: recalled.size,
    tokens: reply.recall?.tokens ?? 0,
    ms,
  };
}

function median(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const round = (value: number, places: number): number => Number(value.toFixed(places));

function summarise(category: string, asked: readonly Asked[]): RecallCategoryReport {
  const mean = (pick: (a: Asked) => number) =>
    asked.length === 0 ? 0 : asked.reduce((sum, a) => sum + pick(a), 0) / asked.length;
  return {
    category,
    questions: asked.length,
    foundAny: asked.filter((a) => a.foundAny).length,
    foundAll: asked.filter((a) => a.foundAll).length,
    itemsPerQuestion: round(
      mean((a) => a.items),
      2,
    ),
    tokensAdded: Math.round(mean((a) => a.tokens)),
    msPerCall: round(median(asked.map((a) => a.ms)), 1),
  };
}

function modeReport(asked: readonly Asked[]): RecallModeReport {
  const categories = [...new Set(asked.map((a) => a.category))];
  return {
    categories: categories.map((category) =>
      summarise(
        category,
        asked.filter((a) => a.category === category),
      ),
    ),
    total: summarise('all', asked),
  };
}

export async function runRecallEval(input: RecallEvalInput): Promise<RecallEvalReport> {
  const { app, data } = input;
  const backlog = app.embeddingBacklog;
  const role = app.settings.models.embed;
  const modes: RecallMode[] = backlog && role ? ['lexical', 'hybrid'] : ['lexical'];
  // The eval embeds at its own pace, through the walk's code; a running walk would race it.
  await backlog?.close();
  const askable = data.conversations.flatMap((c) => c.questions.filter((q) => q.evidence.length));
  const total = askable.length * modes.length;
  let done = 0;
  const asked: Asked[] = [];
  const reached: number[] = [];
  let embedded = 0;
  let embedSeconds = 0;
  const agents = app.agents.list();
  const seeded: string[] = [];
  try {
    for (const conversation of data.conversations) {
      const { sessionId, seqOf, reached: share } = await seed(input, conversation);
      reached.push(share);
      if (modes.includes('hybrid')) {
        const started = performance.now();
        embedded += await backlog!.catchUp();
        embedSeconds += (performance.now() - started) / 1000;
      }
      for (const mode of modes) {
        useMode(app, agents, input.agentName, mode);
        for (const question of conversation.questions) {
          if (question.evidence.length === 0) continue;
          asked.push(await ask(input, mode, sessionId, seqOf, question));
          input.onProgress?.(++done, total);
        }
      }
      seeded.push(sessionId);
    }
    // Deleted only now: SQLite reuses the ids of the newest rows deleted, and
    // the next conversation's messages would then sit behind the walk's cursor.
    for (const sessionId of seeded) await inject(app, 'DELETE', `/sessions/${sessionId}`);
  } finally {
    app.agents.replace(agents);
  }
  const lexical = modeReport(asked.filter((a) => a.mode === 'lexical'));
  return {
    agent: input.agentName,
    model: app.settings.models.main.model,
    compacted: {
      asked: input.compacted,
      reached: round(reached.reduce((a, b) => a + b, 0) / Math.max(reached.length, 1), 3),
    },
    conversations: data.conversations.length,
    skipped: data.conversations.reduce((n, c) => n + c.questions.length, 0) - askable.length,
    embed:
      role && modes.includes('hybrid')
        ? {
            provider: role.provider,
            model: role.model,
            dimensions: role.dimensions,
            messages: embedded,
            seconds: round(embedSeconds, 1),
          }
        : null,
    ...lexical,
    hybrid: modes.includes('hybrid') ? modeReport(asked.filter((a) => a.mode === 'hybrid')) : null,
  };
}

function percent(part: number, whole: number): string {
  return whole === 0 ? '—' : `${Math.round((part / whole) * 100)} %`;
}

const HEADER = [
  '| category | questions | found (any) | found (all) | items / question | tokens added | ms / call |',
  '|---|---:|---:|---:|---:|---:|---:|',
];

function table(report: RecallModeReport): string[] {
  const line = (r: RecallCategoryReport): string =>
    `| ${r.category} | ${r.questions} | ${percent(r.foundAny, r.questions)} | ${percent(r.foundAll, r.questions)} | ${r.itemsPerQuestion.toFixed(1)} | ${r.tokensAdded} | ${r.msPerCall.toFixed(1)} |`;
  return [...HEADER, ...report.categories.map(line), line(report.total)];
}

/**
 * The report as Markdown (what the CLI prints without --json): lexical
 * recall's table, and hybrid recall's below it when an embed role ran.
 */
export function formatRecallReport(report: RecallEvalReport): string {
  const head = `agent ${report.agent}, model ${report.model}: ${report.conversations} conversation(s), ${Math.round(report.compacted.reached * 100)} % compacted (asked ${Math.round(report.compacted.asked * 100)} %)${report.skipped ? `, ${report.skipped} question(s) without evidence skipped` : ''}`;
  if (report.hybrid === null || report.embed === null)
    return [head, '', ...table(report)].join('\n');
  const { embed } = report;
  return [
    head,
    `embed ${embed.provider} ${embed.model}${embed.dimensions === null ? '' : ` (${embed.dimensions} dims)`}: ${embed.messages} message(s) embedded in ${embed.seconds.toFixed(1)} s before the questions`,
    '',
    'lexical',
    '',
    ...table(report),
    '',
    'hybrid',
    '',
    ...table(report.hybrid),
  ].join('\n');
}
