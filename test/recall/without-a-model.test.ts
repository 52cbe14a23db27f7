/**
 * Recall without a model, over a real SQLite store: word
 * forms meet by their stem, a number matches however its thousands are
 * written, a follow-up is searched with the user message before it, and a
 * message that announces its answer in the next one comes with it.
 */
import Database from 'better-sqlite3';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { AgentConfig } from '../../src/agents/agent-config.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { AutomaticRecall } from '../../src/recall/automatic-recall.js';
import { RecallLedger } from '../../src/recall/recall-ledger.js';
import { asksQuestion, isFollowUp, refersToNext } from '../../src/recall/recall-query.js';
import type { GuardedTurn } from '../../src/runtime/context-guard.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { VOCABULARY_BATCH } from '../../src/store/vocabulary.js';

const SETTINGS = {
  enabled: true,
  maxMessages: 6,
  maxTokens: 1_200,
  minScore: 0.5,
  minRelativeScore: 0.4,
};

describe('recall without a model', () => {
  let dir: string;
  let store: SqliteStore;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-recall-forms-'));
    store = new SqliteStore(path.join(dir, 'cairn.db'));
  });

  afterEach(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  /** A session whose `history` (seq 2 on) is all compacted; the seq of each message. */
  async function compacted(history: ChatMessage[]): Promise<GuardedTurn> {
    const created = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
    });
    const stored = await store.appendMessages(created.id, [
      ...history,
      { role: 'user', content: 'Tail.' },
    ]);
    await store.commitCompaction({
      sessionId: created.id,
      expectedSize: 0,
      toSize: history.length,
      toSeq: stored[history.length - 1]!.seq,
      summary: 'S',
      trigger: 'manual',
      model: 'm',
      inputChars: 10,
    });
    const session = (await store.findSession(created.id))!;
    const agent = { defaultCompaction: { recall: SETTINGS } } as AgentConfig;
    return { session, agent } as GuardedTurn;
  }

  async function recalled(turn: GuardedTurn, context: ChatMessage[]): Promise<number[]> {
    const recall = new AutomaticRecall({
      store,
      contextWindow: 100_000,
      estimate: async () => 1_000,
      ledger: new RecallLedger(),
    });
    const { done } = await recall.recall(turn, [
      { role: 'system', content: 'System.' },
      ...context,
    ]);
    return done?.seqs ?? [];
  }

  const ask = (question: string): ChatMessage[] => [{ role: 'user', content: question }];

  it('finds a word by its stem: "deployed" finds "deploying"', async () => {
    const turn = await compacted([
      { role: 'user', content: 'We are deploying the billing service on Friday.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
      { role: 'user', content: 'The office plant needs water.' }, // 4
    ]);
    expect(await recalled(turn, ask('When is it deployed?'))).toEqual([2]);
  });

  it('matches a number however its thousands are written', async () => {
    const turn = await compacted([
      { role: 'user', content: 'The invoice total was 4,500 euros.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
      { role: 'user', content: 'The deposit was 7200 dollars.' }, // 4
      { role: 'assistant', content: 'Noted too.' }, // 5
    ]);
    expect(await recalled(turn, ask('Which payment was 4500?'))).toEqual([2]);
    expect(await recalled(turn, ask('What were the 7,200 for?'))).toEqual([4]);
    expect(await recalled(turn, ask('And 4.500?'))).toEqual([2]);
  });

  it('searches a follow-up with the user message before it', async () => {
    const turn = await compacted([
      { role: 'user', content: 'The red locker code is 1111.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
      { role: 'user', content: 'The blue locker code is 2222.' }, // 4
      { role: 'assistant', content: 'Noted as well.' }, // 5
    ]);
    const seqs = await recalled(turn, [
      { role: 'user', content: 'What is the red locker code?' },
      { role: 'assistant', content: '1111.' },
      { role: 'user', content: 'and the other one?' },
    ]);
    expect(seqs).toContain(4);
    // Without a message before it, the follow-up alone searches nothing.
    expect(await recalled(turn, ask('and the other one?'))).toEqual([]);
    // An acknowledgement is no follow-up: it searches nothing.
    expect(
      await recalled(turn, [
        { role: 'user', content: 'What is the red locker code?' },
        { role: 'assistant', content: '1111.' },
        { role: 'user', content: 'ok, thanks' },
      ]),
    ).toEqual([]);
  });

  it("brings a message's announced answer with it: the speaker's next message", async () => {
    const turn = await compacted([
      { role: 'user', content: 'The backup path is in my next message.' }, // 2
      { role: 'assistant', content: 'Ok, send it.' }, // 3
      { role: 'user', content: '/srv/store/cairn-7' }, // 4
      { role: 'assistant', content: 'Got it.' }, // 5
    ]);
    expect(await recalled(turn, ask('Where is the backup path?'))).toEqual([2, 4]);
  });

  it('brings the reply to a recalled question: the answer rarely repeats its words', async () => {
    const turn = await compacted([
      { role: 'assistant', content: 'Do you take the kids to the park often?' }, // 2
      { role: 'user', content: 'Yes, a few times a week, mostly after school.' }, // 3
      { role: 'assistant', content: 'Noted.' }, // 4
      { role: 'user', content: 'The office plant needs water.' }, // 5
      { role: 'assistant', content: 'The park by the river is lovely.' }, // 6
      { role: 'user', content: 'It is.' }, // 7
    ]);
    expect(await recalled(turn, ask('How often do I take the kids to the park?'))).toEqual([2, 3]);
    // A statement brings no neighbour (the question is farther than CONTEXT_SPAN).
    expect(await recalled(turn, ask('Which park is by the river?'))).toEqual([6]);
  });

  it('brings the earlier half of a split fact: the announcement, or what "that was" refers to', async () => {
    const turn = await compacted([
      { role: 'user', content: 'The backup path is in my next message.' }, // 2
      { role: 'assistant', content: 'Ok, send it.' }, // 3
      { role: 'user', content: '/srv/backups/ledger-nightly' }, // 4
      { role: 'assistant', content: 'Got it.' }, // 5
      { role: 'user', content: 'Rotterdam, Wilhelminakade 909, gate B.' }, // 6
      { role: 'assistant', content: 'What is that address?' }, // 7
      { role: 'user', content: 'That was the address of the storage warehouse.' }, // 8
      { role: 'assistant', content: 'Thanks.' }, // 9
    ]);
    expect(await recalled(turn, ask('Where are the ledger backups?'))).toEqual([2, 4]);
    expect(await recalled(turn, ask('What is the storage warehouse address?'))).toEqual([6, 8]);
  });

  it('a short session reads a word again right after finding it common', async () => {
    const turn = await compacted([
      { role: 'user', content: 'alpha one' }, // 2
      { role: 'assistant', content: 'alpha two' }, // 3
      { role: 'user', content: 'alpha three' }, // 4
      { role: 'assistant', content: 'zeta four' }, // 5
    ]);
    const terms = (...words: string[]) => words.map((text) => ({ text, prefix: false }));
    const id = turn.session.id;
    const pointer = turn.session.compact_seq;
    expect(await store.recallMessages(id, terms('alpha'), pointer, 10)).toHaveLength(3);
    // "alpha" was just found in most messages; it is still read, with "zeta".
    const both = await store.recallMessages(id, terms('alpha', 'zeta'), pointer, 10);
    expect(both.map((hit) => hit.seq).sort()).toEqual([2, 3, 4, 5]);
  });

  it('finds a misspelled word as the word the history holds: "recieve", "postgress", one edit off', async () => {
    const turn = await compacted([
      { role: 'user', content: 'I did not receive the invoice from the landlord.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
      { role: 'user', content: 'The reporting database runs postgres on the old host.' }, // 4
      { role: 'assistant', content: 'Noted too.' }, // 5
      { role: 'user', content: 'Our authentication gateway restarts at noon.' }, // 6
      { role: 'assistant', content: 'Ok.' }, // 7
      { role: 'user', content: 'The office plant needs water.' }, // 8
    ]);
    expect(await recalled(turn, ask('Did I recieve it?'))).toEqual([2]);
    expect(await recalled(turn, ask('Which postgress version?'))).toEqual([4]);
    // A long word two edits off (a swap and a letter too many).
    expect(await recalled(turn, ask('Where is the authnetiication?'))).toEqual([6]);
    // A four-letter word is never corrected ("plnt" is not "plant").
    expect(await recalled(turn, ask('plnt?'))).toEqual([]);
    // Nor is a word corrected to one recall never searches: "cover" is one edit from "over".
    const over = await compacted([
      { role: 'user', content: 'The game is over now.' }, // 2
      { role: 'assistant', content: 'Noted.' }, // 3
    ]);
    expect(await recalled(over, ask('Which cover?'))).toEqual([]);
  });

  it('leaves a word the history holds as it is, and corrects only long enough words', async () => {
    const turn = await compacted([
      { role: 'user', content: 'The recieve queue is full.' }, // 2
      { role: 'assistant', content: 'The recieve queue drains at night.' }, // 3
      ...Array.from({ length: 6 }, (_, i) => ({
        role: 'user' as const,
        content: `We receive parcel ${i} at the gate.`,
      })),
    ]);
    const id = turn.session.id;
    const pointer = turn.session.compact_seq;
    const words = (...texts: string[]) => texts.map((text) => ({ text, prefix: false }));
    // "recieve" is said twice here: kept. "recelve" is said nowhere: the word many messages hold.
    expect(await store.correctRecallTerms(id, words('recieve', 'recelve'), pointer)).toEqual(
      words('recieve', 'receive'),
    );
    // Five letters are corrected, four are not, a number is not.
    expect(await store.correctRecallTerms(id, words('gatte', 'gatt', '2024'), pointer)).toEqual(
      words('gate', 'gatt', '2024'),
    );
  });

  it('reads an existing history into the vocabulary in resumable batches', async () => {
    const created = await store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'System.',
    });
    const many = Array.from({ length: VOCABULARY_BATCH + 400 }, (_, i) => ({
      role: 'user' as const,
      content: i === 10 ? 'The warehouse is in Rotterdam.' : `Filler ${i}.`,
    }));
    await store.appendMessages(created.id, many);
    await store.close();
    // As migration 023 leaves a database that already has messages: an empty vocabulary at mark 0.
    const raw = new Database(path.join(dir, 'cairn.db'));
    raw.exec('DELETE FROM history_words; DELETE FROM history_word_keys;');
    raw.exec('UPDATE history_vocabulary SET last_message_id = 0');
    raw.close();
    store = new SqliteStore(path.join(dir, 'cairn.db'));
    expect(await store.indexVocabularyBatch()).toBe(VOCABULARY_BATCH);
    // Stopped here and opened again, it goes on from its mark.
    await store.close();
    store = new SqliteStore(path.join(dir, 'cairn.db'));
    expect(await store.indexVocabularyBatch()).toBe(many.length + 1 - VOCABULARY_BATCH);
    expect(await store.indexVocabularyBatch()).toBe(0);
    const words = [{ text: 'warehose', prefix: false }];
    expect(await store.correctRecallTerms(created.id, words, many.length + 1)).toEqual([
      { text: 'warehouse', prefix: false },
    ]);
  });

  it('tells follow-ups and announcements by their words', () => {
    expect(isFollowUp('and the other one?')).toBe(true);
    expect(isFollowUp('what about the second?')).toBe(true);
    expect(isFollowUp('ok, thanks')).toBe(false);
    expect(isFollowUp('What time is it?')).toBe(false);
    expect(isFollowUp('What is the gym locker code?')).toBe(false);
    expect(refersToNext('The path is in my next message.')).toBe(true);
    expect(refersToNext('The hosts are:')).toBe(true);
    expect(refersToNext('The path is /srv/data.')).toBe(false);
    expect(asksQuestion('Do you take the kids to the park? Just curious.')).toBe(true);
    expect(asksQuestion('[2023-05-08T13:56:00Z] Mel: Where is it?')).toBe(true);
    expect(asksQuestion('See https://example.com/search?q=park for the map.')).toBe(false);
  });
});
