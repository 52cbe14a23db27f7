/**
 * `kill -9` under load. A real `cairn serve` process runs concurrent chats over
 * shared sessions against the fake model (small random delays), and is
 * SIGKILLed at a random moment; this repeats on the same database (6 times
 * under heavy load, and 100 times with short turns), then the server is
 * restarted once more and the stored histories are checked: every turn that got
 * a 200 is there whole (its user message immediately followed by its reply),
 * turns on one session never interleave, nothing is stored twice, and SQLite's
 * integrity check passes. A user message with no reply is allowed only where a
 * kill cut its turn: its request never got a 200, and there is at most one per
 * session per kill. Such a message can sit mid-history (the next cycle's turns
 * follow it).
 */
import { rmSync } from 'node:fs';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { dbPathOf, spawnServer, type ServerProcess } from './spawn-server.js';

/**
 * How hard each kill cycle loads the server. The kill lands at a random
 * moment measured in progress, not wall time (so a slow machine still gets
 * real load): after a random number of turns of the cycle were acknowledged,
 * plus a random few milliseconds; or at the deadline if the cycle has not
 * reached its turn count by then.
 */
interface CrashProfile {
  killCycles: number;
  concurrentChats: number;
  sharedSessions: number;
  killAfterTurnsMin: number;
  killAfterTurnsMax: number;
  killJitterMaxMs: number;
  killDeadlineMs: number;
  /**
   * No new cycle starts after this much wall time (a cycle is mostly server
   * start-up, seconds on a loaded machine); at least `minCycles` must run.
   */
  budgetMs: number;
  minCycles: number;
}

/** Few kills under heavy load: 40 concurrent chats on 4 sessions. */
const HEAVY: CrashProfile = {
  killCycles: 6,
  concurrentChats: 40,
  sharedSessions: 4,
  killAfterTurnsMin: 5,
  killAfterTurnsMax: 60,
  killJitterMaxMs: 40,
  killDeadlineMs: 5_000,
  budgetMs: Infinity,
  minCycles: 6,
};
/**
 * A hundred kills, every one of them, with short turns and light
 * load so the run stays bounded (most of each cycle is the server starting:
 * about 1 s on a quiet machine, 3 s on a loaded one).
 */
const HUNDRED_KILLS: CrashProfile = {
  killCycles: 100,
  concurrentChats: 6,
  sharedSessions: 3,
  killAfterTurnsMin: 1,
  killAfterTurnsMax: 8,
  killJitterMaxMs: 20,
  killDeadlineMs: 2_000,
  budgetMs: Infinity,
  minCycles: 100,
};
const MAX_FAKE_DELAY_MS = 30;

interface Acknowledged {
  sessionId: string;
  text: string;
  userSeq: number;
  assistantSeq: number;
}

interface HistoryMessage {
  seq: number;
  role: string;
  content: string | null;
}

const replyTo = (text: string): string => `reply to ${text}`;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function randomInt(min: number, max: number): number {
  return min + Math.floor(Math.random() * (max - min + 1));
}

/** The chat envelope (`POST /agents/:name/chat`) as far as this test reads it; else an error body. */
interface ChatResponse {
  sessionId: string;
  reply: string;
  messages: { seq: number }[];
}

async function postJson<T>(url: string, body: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as T };
}

async function readHistory(server: ServerProcess, sessionId: string): Promise<HistoryMessage[]> {
  const history: HistoryMessage[] = [];
  for (;;) {
    const afterSeq = history.at(-1)?.seq ?? 0;
    const res = await fetch(
      `${server.url}/sessions/${sessionId}/messages?afterSeq=${afterSeq}&limit=1000`,
    );
    expect(res.status).toBe(200);
    const page = ((await res.json()) as { messages: HistoryMessage[] }).messages;
    if (page.length === 0) return history;
    history.push(...page);
  }
}

/**
 * Everything wrong with one session's stored history, as readable lines.
 * Allowed: a user message with no reply, if its request was never
 * acknowledged (the kill landed between storing it and storing the reply).
 */
function historyProblems(
  sessionId: string,
  history: HistoryMessage[],
  acknowledged: Acknowledged[],
  acknowledgedTexts: ReadonlySet<string>,
): { problems: string[]; unanswered: number } {
  const problems: string[] = [];
  const at = (i: number): string => `${sessionId} seq ${history[i]?.seq}`;
  if (history[0]?.role !== 'system') problems.push(`${sessionId}: does not start with system`);
  const seen = new Set<string>();
  let unanswered = 0;
  for (let i = 1; i < history.length; i++) {
    const message = history[i]!;
    const previous = history[i - 1]!;
    const next = history[i + 1];
    if (message.role === 'user') {
      const text = message.content ?? '';
      if (seen.has(text)) problems.push(`${at(i)}: user message "${text}" stored twice`);
      seen.add(text);
      if (next?.role !== 'assistant') {
        unanswered++;
        if (acknowledgedTexts.has(text)) {
          problems.push(`${at(i)}: acknowledged turn "${text}" has no reply after it`);
        }
      }
    } else if (message.role === 'assistant') {
      if (previous.role !== 'user' || message.content !== replyTo(previous.content ?? '')) {
        problems.push(
          `${at(i)}: reply "${message.content}" does not directly follow its user message (previous: ${previous.role} "${previous.content}")`,
        );
      }
    } else {
      problems.push(`${at(i)}: unexpected ${message.role} message`);
    }
  }
  const bySeq = new Map(history.map((m) => [m.seq, m]));
  for (const ack of acknowledged) {
    const user = bySeq.get(ack.userSeq);
    const assistant = bySeq.get(ack.assistantSeq);
    if (user?.role !== 'user' || user.content !== ack.text) {
      problems.push(
        `${sessionId}: acknowledged user message "${ack.text}" missing at seq ${ack.userSeq}`,
      );
    }
    if (assistant?.role !== 'assistant' || assistant.content !== replyTo(ack.text)) {
      problems.push(
        `${sessionId}: acknowledged reply to "${ack.text}" missing at seq ${ack.assistantSeq}`,
      );
    }
    if (ack.assistantSeq !== ack.userSeq + 1) {
      problems.push(
        `${sessionId}: "${ack.text}" was answered at seq ${ack.assistantSeq}, not right after seq ${ack.userSeq}`,
      );
    }
  }
  return { problems, unanswered };
}

describe.each([
  ['6 kills under heavy load', HEAVY],
  ['100 kills of short turns', HUNDRED_KILLS],
])('kill -9 under concurrent turns on shared sessions: %s', (_label, profile) => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess | undefined;

  beforeAll(async () => {
    fake = await startFakeLlmServer();
    fake.setDefault((body) => {
      const lastUser = [...(body.messages as { role: string; content: string }[])]
        .reverse()
        .find((m) => m.role === 'user');
      return {
        content: replyTo(lastUser?.content ?? ''),
        delayMs: randomInt(0, MAX_FAKE_DELAY_MS),
      };
    });
    home = makeHome({}, fake.baseURL);
  });

  afterAll(async () => {
    await server?.stop('SIGKILL');
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('keeps every acknowledged turn whole and never interleaves turns', async () => {
    const sessions: string[] = [];
    const acknowledged: Acknowledged[] = [];
    const unacknowledged = new Set<string>();
    const unexpected: string[] = [];

    const startedAt = Date.now();
    let cycles = 0;
    for (let cycle = 0; cycle < profile.killCycles; cycle++) {
      if (Date.now() - startedAt > profile.budgetMs) break;
      cycles += 1;
      server = await spawnServer({ home });
      const { url } = server;
      if (cycle === 0) {
        for (let i = 0; i < profile.sharedSessions; i++) {
          const created = await postJson<{ session: { id: string } }>(`${url}/sessions`, {
            agentName: 'assistant',
          });
          expect(created.status).toBe(201);
          sessions.push(created.json.session.id);
        }
      }

      let loading = true;
      let cycleAcks = 0;
      const killAfterTurns = randomInt(profile.killAfterTurnsMin, profile.killAfterTurnsMax);
      let reachedTarget: () => void = () => {};
      const target = new Promise<void>((resolve) => (reachedTarget = resolve));
      const chats = Array.from({ length: profile.concurrentChats }, async (_, worker) => {
        const sessionId = sessions[worker % profile.sharedSessions]!;
        for (let n = 0; loading; n++) {
          const text = `turn c${cycle}-w${worker}-n${n}`;
          let response: { status: number; json: ChatResponse };
          try {
            response = await postJson<ChatResponse>(`${url}/agents/assistant/chat`, {
              message: text,
              sessionId,
            });
          } catch {
            // The process died before the whole response arrived.
            unacknowledged.add(text);
            return;
          }
          if (response.status !== 200) {
            unexpected.push(`${text}: HTTP ${response.status} ${JSON.stringify(response.json)}`);
            continue;
          }
          const { json } = response;
          const [user, assistant] = json.messages;
          if (
            json.sessionId !== sessionId ||
            json.reply !== replyTo(text) ||
            json.messages.length !== 2 ||
            user === undefined ||
            assistant === undefined
          ) {
            unexpected.push(`${text}: wrong envelope ${JSON.stringify(json)}`);
            continue;
          }
          acknowledged.push({ sessionId, text, userSeq: user.seq, assistantSeq: assistant.seq });
          if (++cycleAcks >= killAfterTurns) reachedTarget();
        }
      });

      let deadline: NodeJS.Timeout | undefined;
      await Promise.race([
        target,
        new Promise((resolve) => (deadline = setTimeout(resolve, profile.killDeadlineMs))),
      ]);
      clearTimeout(deadline);
      await sleep(randomInt(0, profile.killJitterMaxMs));
      const exit = await server.stop('SIGKILL');
      loading = false;
      expect(exit.signal).toBe('SIGKILL');
      await Promise.all(chats);
    }

    // The load really ran, and every kill cut turns in flight.
    expect(unexpected).toEqual([]);
    expect(cycles).toBeGreaterThanOrEqual(profile.minCycles);
    expect(acknowledged.length).toBeGreaterThanOrEqual(cycles);
    expect(unacknowledged.size).toBeGreaterThanOrEqual(cycles);

    server = await spawnServer({ home });
    const acknowledgedTexts = new Set(acknowledged.map((a) => a.text));
    const problems: string[] = [];
    for (const sessionId of sessions) {
      const history = await readHistory(server, sessionId);
      const result = historyProblems(
        sessionId,
        history,
        acknowledged.filter((a) => a.sessionId === sessionId),
        acknowledgedTexts,
      );
      problems.push(...result.problems);
      // A kill leaves at most one unanswered turn per session: the one running.
      if (result.unanswered > cycles) {
        problems.push(
          `${sessionId}: ${result.unanswered} unanswered user messages after ${cycles} kills`,
        );
      }
    }
    expect(problems).toEqual([]);

    // Every session is still usable after the crashes.
    for (const sessionId of sessions) {
      const after = await postJson<ChatResponse>(`${server.url}/agents/assistant/chat`, {
        message: `after the crashes ${sessionId}`,
        sessionId,
      });
      expect(after.status).toBe(200);
      expect(after.json.reply).toBe(replyTo(`after the crashes ${sessionId}`));
    }
    // No request the crashes left behind was malformed on the wire.
    expect(fake.requests.filter((r) => r.problems.length > 0)).toEqual([]);

    const stopped = await server.stop('SIGTERM');
    expect(stopped).toEqual({ code: 0, signal: null });
    server = undefined;

    const db = new Database(dbPathOf(home));
    try {
      expect(db.pragma('integrity_check', { simple: true })).toBe('ok');
      expect(db.pragma('foreign_key_check')).toEqual([]);
      // Each append bumps message_count in the same transaction as the rows.
      const drift = db
        .prepare(
          `SELECT s.id, s.message_count, (SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id) AS stored
           FROM sessions s`,
        )
        .all() as { id: string; message_count: number; stored: number }[];
      expect(drift.filter((row) => row.message_count !== row.stored)).toEqual([]);
      // No row is stuck "running" after the restarts.
      expect(db.prepare("SELECT COUNT(*) AS n FROM tasks WHERE status = 'running'").get()).toEqual({
        n: 0,
      });
      // The full-text index matches the messages table.
      expect(() =>
        db.exec("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')"),
      ).not.toThrow();
    } finally {
      db.close();
    }
  }, 600_000);
});
