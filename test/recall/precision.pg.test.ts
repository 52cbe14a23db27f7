/**
 * Recall's precision, end to end on both store dialects: an item earns its
 * place against the best match (recall.minRelativeScore), a question made
 * only of words the whole conversation repeats recalls nothing, and of two
 * recalled messages that give different values for the same thing the newer
 * one is marked in the block.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { RECALL_OPEN } from '../../src/recall/recall-block.js';
import {
  chatOn,
  DATABASES,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { agentRequestsOf, isSummaryRequest } from '../compaction/summary-requests.js';

interface WireMessage {
  role: string;
  content: string | null;
}

const OLD_CODE = 'Tessa told me the marina boathouse gate code is 4812.';
const NEW_CODE = 'Tessa changed it today: the marina boathouse gate code is now 7731.';
const WEAK = 'Please give me the code review notes by Friday.';

/**
 * 60 messages: filler that keeps repeating "haha" and "funny" (held by
 * more than a quarter of them), three requests that share two words with the
 * question about the gate code, and that code, stated and later changed.
 */
function conversation(): ChatMessage[] {
  const texts = Array.from({ length: 60 }, (_, i) =>
    i % 2 === 0
      ? `Haha, the story number ${i} about the ferry was so funny.`
      : `Funny indeed; the weather on day ${i} was mild.`,
  );
  texts[6] = OLD_CODE;
  for (const [at, day] of [
    [12, 'Friday'],
    [20, 'Monday'],
    [28, 'Tuesday'],
  ] as const) {
    texts[at] = WEAK.replace('Friday', day);
  }
  texts[40] = NEW_CODE;
  return texts.map((content, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', content }));
}

const isBlock = (m: WireMessage) => (m.content ?? '').startsWith(RECALL_OPEN);

describe.each(DATABASES)('recall precision (%s)', (database) => {
  let t: TestApp;
  let id: string;
  const seqOf = async (text: string): Promise<number> => {
    const res = await t.app.server.inject({ url: `/sessions/${id}/messages?limit=200` });
    const messages = res.json<{ messages: { seq: number; content: string }[] }>().messages;
    return messages.find((m) => m.content === text)!.seq;
  };
  const blockOfLastRequest = (): string => {
    const sent = agentRequestsOf(t.fake!).at(-1)!.body.messages as WireMessage[];
    return sent.find(isBlock)?.content ?? '';
  };

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { assistant: { ...TEST_AGENT, defaultCompaction: { compactCount: 99 } } },
    });
    t.fake!.setDefault((body) =>
      isSummaryRequest(body) ? { content: 'They chatted.' } : { content: 'ok' },
    );
    id = await seedSession(t.app, conversation());
    const res = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(res.statusCode, res.body).toBe(200);
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    t.fake!.reset();
    t.fake!.setDefault(() => ({ content: 'ok' }));
  });

  it('recalls the strong matches only, not those that share a weaker word or two', async () => {
    const res = await chatOn(t.app, id, 'Which marina boathouse gate code did Tessa give us?');
    expect(res.statusCode, res.body).toBe(200);
    const seqs = res.json<{ recall: { seqs: number[] } }>().recall.seqs;
    expect(seqs).toEqual([await seqOf(OLD_CODE), await seqOf(NEW_CODE)]);
  });

  it('marks the newer of two values for the same thing', async () => {
    await chatOn(t.app, id, 'What is the boathouse gate code from Tessa?');
    const block = blockOfLastRequest();
    const older = await seqOf(OLD_CODE);
    const newer = await seqOf(NEW_CODE);
    expect(block).toContain(`<message seq="${older}" role="user" time="`);
    expect(block).toMatch(new RegExp(`<message seq="${newer}" [^>]*supersedes="${older}">`));
    expect(block).not.toMatch(new RegExp(`<message seq="${older}" [^>]*supersedes=`));
  });

  it('a question of words the whole conversation repeats recalls nothing', async () => {
    for (const message of ['Haha, that is so funny!', 'Funny, haha.']) {
      const res = await chatOn(t.app, id, message);
      expect(res.json().recall, message).toBeNull();
    }
  });

  it('a word said in few messages is still found next to the repeated ones', async () => {
    const res = await chatOn(t.app, id, 'That funny ferry story, haha, what was number 14?');
    const seqs = res.json<{ recall: { seqs: number[] } | null }>().recall?.seqs ?? [];
    expect(seqs.length).toBeGreaterThan(0);
  });
});
