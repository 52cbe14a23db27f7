/**
 * AutomaticRecall over a real SQLite store: when it searches at all (recall
 * on, a compacted session, a query with terms, room for an item), what it
 * asks the store for, which hits it keeps (score, count, blank text), how the
 * block is ordered and counted, and what the ledger holds after each call.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { estimateMessagesTokens } from '../../src/llm/tokens.js';
import { AutomaticRecall, type AutomaticRecallDeps } from '../../src/recall/automatic-recall.js';
import { renderRecallBlock } from '../../src/recall/recall-block.js';
import { RecallLedger } from '../../src/recall/recall-ledger.js';
import type { GuardedTurn } from '../../src/runtime/context-guard.js';
import type { RecallHit, SessionRow } from '../../src/store/store.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';

type RecallSettings = AgentConfig['defaultCompaction']['recall'];
const SETTINGS: RecallSettings = {
  enabled: true,
  maxMessages: 6,
  maxTokens: 1_200,
  minScore: 0.5,
  minRelativeScore: 0.4,
};

/** Stored before the compaction pointer; seqs 2..7. */
const HISTORY: ChatMessage[] = [
  { role: 'user', content: 'The marina gate code is 4812.' },
  { role: 'assistant', content: 'Noted: the marina gate code.' },
  { role: 'user', content: 'The budget for the roof is 9000 euros.' },
  { role: 'assistant', content: 'Noted: the roof budget.' },
  { role: 'user', content: 'The caretaker of the marina is called Ines.' },
  { role: 'assistant', content: 'Noted.' },
];

describe('AutomaticRecall', () => {
  let dir: string;
  let store: SqliteStore;
  let session: SessionRow;
  let ledger: RecallLedger;
  /** The arguments of every store search, and the ledger each estimate saw. */
  let searches: Parameters<SqliteStore['recallMessages']>[];
  let estimatesSawLedger: number[];

  beforeEach(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-recall-'));
    store = new SqliteStore(path.join(dir, 'cairn.db'));
    const created = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
    });
    const stored = await store.appendMessages(created.id, [
      ...HISTORY,
      { role: 'user', content: 'The marina again, after the pointer.' },
    ]);
    const committed = await store.commitCompaction({
      sessionId: created.id,
      expectedSize: 0,
      toSize: HISTORY.length,
      toSeq: stored[HISTORY.length - 1]!.seq,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 10,
    });
    expect(committed).toBeTruthy();
    session = (await store.findSession(created.id))!;
    ledger = new RecallLedger();
    searches = [];
    estimatesSawLedger = [];
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  function recaller(
    options: { contextWindow?: number; promptTokens?: number; hits?: RecallHit[] } = {},
  ): AutomaticRecall {
    const deps: AutomaticRecallDeps = {
      store: {
        recallMessages: async (...args) => {
          searches.push(args);
          return options.hits ?? store.recallMessages(...args);
        },
        listMessages: (...args) => store.listMessages(...args),
      },
      contextWindow: options.contextWindow ?? 100_000,
      estimate: async (turn) => {
        estimatesSawLedger.push(ledger.tokens(turn.session.id));
        return options.promptTokens ?? 1_000;
      },
      ledger,
    };
    return new AutomaticRecall(deps);
  }

  function turn(
    recall: Partial<RecallSettings> = {},
    extra: { autoThreshold?: number; session?: SessionRow } = {},
  ): GuardedTurn {
    const agent = {
      defaultCompaction: {
        recall: { ...SETTINGS, ...recall },
        ...(extra.autoThreshold !== undefined ? { autoThreshold: extra.autoThreshold } : {}),
      },
    } as AgentConfig;
    // Recall reads only the session and the agent of a turn.
    return { session: extra.session ?? session, agent } as GuardedTurn;
  }

  const ask = (question: string): ChatMessage[] => [
    { role: 'system', content: 'System.' },
    { role: 'assistant', content: 'Earlier reply.' },
    { role: 'user', content: question },
  ];

  it('puts the matching compacted messages back, oldest first, before the question', async () => {
    const messages = ask('What was the marina gate code, and who is the marina caretaker?');
    const out = await recaller().recall(turn({ minScore: 0.25 }), messages);
    expect(out.done).not.toBeNull();
    const { seqs, tokens, block } = out.done!;
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(seqs).toContain(2);
    expect(seqs).toContain(6);
    expect(seqs.every((seq) => seq <= session.compact_seq)).toBe(true);
    expect(block.role).toBe('user');
    expect(block.content).toContain('role="user" time="');
    expect(block.content).toContain('The marina gate code is 4812.');
    expect(block.content).not.toContain('after the pointer');
    expect(tokens).toBe(estimateMessagesTokens([block]));
    expect(out.messages).toEqual([messages[0], messages[1], block, messages[2]]);
    expect(ledger.tokens(session.id)).toBe(tokens);
    // One search, up to three candidates per wanted message, stopping at the pointer.
    expect(searches).toHaveLength(1);
    expect(searches[0]![0]).toBe(session.id);
    expect(searches[0]![2]).toBe(session.compact_seq);
    expect(searches[0]![3]).toBe(18);
  });

  it('lays the items out in seq order whatever the rank, with their stored role and time', async () => {
    const hits: RecallHit[] = [
      {
        seq: 5,
        role: 'assistant',
        content: 'marina gate',
        created_at: '2026-01-05T00:00:00.000Z',
        score: 2,
      },
      {
        seq: 2,
        role: 'user',
        content: 'marina gate code',
        created_at: '2026-01-02T00:00:00.000Z',
        score: 1,
      },
    ];
    const out = await recaller({ hits }).recall(turn(), ask('marina gate'));
    expect(out.done!.seqs).toEqual([2, 5]);
    expect(out.done!.block.content).toBe(
      renderRecallBlock([
        { seq: 2, role: 'user', created_at: '2026-01-02T00:00:00.000Z', text: 'marina gate code' },
        { seq: 5, role: 'assistant', created_at: '2026-01-05T00:00:00.000Z', text: 'marina gate' },
      ]),
    );
  });

  it('keeps a hit scoring exactly minScore, drops blank and lower ones, and at most maxMessages', async () => {
    const hit = (seq: number, content: string): RecallHit => ({
      seq,
      role: 'user',
      content,
      created_at: '2026-01-01T00:00:00.000Z',
      score: 1,
    });
    // Four terms: marina, gate, code, roof.
    const question = ask('marina gate code roof');
    const hits = [
      hit(1, 'marina gate'),
      hit(2, 'marina only'),
      hit(3, '   '),
      hit(4, 'gate code roof'),
    ];
    const half = await recaller({ hits }).recall(turn({ minScore: 0.5 }), question);
    expect(half.done!.seqs).toEqual([1, 4]);
    const none = await recaller({ hits }).recall(turn({ minScore: 0 }), question);
    expect(none.done!.seqs).toEqual([1, 2, 4]);
    const one = await recaller({ hits }).recall(turn({ minScore: 0.5, maxMessages: 1 }), question);
    expect(one.done!.seqs).toEqual([1]);
    expect(searches.at(-1)![3]).toBe(3);
  });

  it('returns the messages as they were, and records no block, when nothing matches', async () => {
    ledger.set(session.id, 40);
    const messages = ask('quantum chromodynamics');
    const out = await recaller().recall(turn(), messages);
    expect(out).toEqual({ messages, done: null });
    expect(out.messages).toBe(messages);
    expect(searches).toHaveLength(1);
    expect(ledger.tokens(session.id)).toBe(0);
  });

  it('searches nothing for a message of acknowledgements, and forgets the last block', async () => {
    ledger.set(session.id, 40);
    const out = await recaller().recall(turn(), ask('ok, thanks!'));
    expect(out.done).toBeNull();
    expect(searches).toEqual([]);
    // The estimate was made with the last block still known, so it could take it out.
    expect(estimatesSawLedger).toEqual([40]);
    expect(ledger.tokens(session.id)).toBe(0);
  });

  it('searches nothing without a user message', async () => {
    const out = await recaller().recall(turn(), [{ role: 'system', content: 'marina gate code' }]);
    expect(out.done).toBeNull();
    expect(searches).toEqual([]);
  });

  it('does nothing when recall is off or nothing was compacted, and clears the ledger', async () => {
    ledger.set(session.id, 40);
    const off = await recaller().recall(turn({ enabled: false }), ask('marina gate code'));
    expect(off.done).toBeNull();
    expect(ledger.tokens(session.id)).toBe(0);
    ledger.set(session.id, 40);
    const fresh = { ...session, compact_seq: 0 };
    const never = await recaller().recall(turn({}, { session: fresh }), ask('marina gate code'));
    expect(never.done).toBeNull();
    expect(ledger.tokens(session.id)).toBe(0);
    expect(searches).toEqual([]);
    expect(estimatesSawLedger).toEqual([]);
  });

  it('leaves the ledger alone for a preview, which no call carries', async () => {
    ledger.set(session.id, 40);
    const question = ask('marina gate code');
    const shown = await recaller().recall(turn(), question, { preview: true });
    expect(shown.done).not.toBeNull();
    expect(ledger.tokens(session.id)).toBe(40);
    await recaller().recall(turn({ enabled: false }), question, { preview: true });
    await recaller().recall(turn(), ask('ok'), { preview: true });
    expect(ledger.tokens(session.id)).toBe(40);
    const sent = await recaller().recall(turn(), question);
    expect(ledger.tokens(session.id)).toBe(sent.done!.tokens);
  });

  it('searches only when the room left holds the frame and one small item', async () => {
    const question = ask('marina gate code');
    // The frame is 251 characters (84 tokens at 3 per token) and an item needs 48.
    const short = await recaller().recall(turn({ maxTokens: 131 }), question);
    expect(short.done).toBeNull();
    expect(searches).toEqual([]);
    await recaller().recall(turn({ maxTokens: 132 }), question);
    expect(searches).toHaveLength(1);
    // The window's room counts too: 90 % of 10 000 minus a prompt of 8 869 leaves 131.
    await recaller({ contextWindow: 10_000, promptTokens: 8_869 }).recall(turn(), question);
    expect(searches).toHaveLength(1);
    await recaller({ contextWindow: 10_000, promptTokens: 8_868 }).recall(turn(), question);
    expect(searches).toHaveLength(2);
    // An autoThreshold below the ceiling lowers it.
    await recaller({ contextWindow: 10_000, promptTokens: 7_869 }).recall(
      turn({}, { autoThreshold: 80 }),
      question,
    );
    expect(searches).toHaveLength(2);
  });
});
