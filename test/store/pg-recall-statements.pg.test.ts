/**
 * Recall's search on Postgres past its window of the session's newest 400
 * messages: a rare word is found in the window and below it, in rows that
 * hold none of the common words, and a question made only of common words
 * (no evidence word, so nothing can be recalled) costs one statement, not
 * the candidates' read too. The count is exact, never a timing
 * (test/helpers/statement-counter.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';
import { StatementCounter } from '../helpers/statement-counter.js';

const term = (text: string) => ({ text, prefix: false });

let t: TestApp;
let counter: StatementCounter;

beforeAll(async () => {
  t = await startTestApp({ database: 'postgres' });
  counter = StatementCounter.install();
});
afterAll(async () => {
  counter?.uninstall();
  await t?.close();
});

describe('recall on Postgres, a session longer than its window', () => {
  it('finds a rare word below the window and alone in it; common words alone read no candidates', async () => {
    const session = await t.app.store.createSession({
      agentName: 'assistant',
      mode: 'chat',
      compactCount: 50,
      systemPrompt: 'You help.',
    });
    // 450 messages of two words every message holds; seq 2 is the first.
    const messages: ChatMessage[] = Array.from({ length: 450 }, (_, i) => ({
      role: i % 2 === 0 ? 'user' : 'assistant',
      content: `The ferry left on time and the weather was mild, day ${i}.`,
    }));
    messages[5] = { role: 'assistant', content: 'The ferry stopped at the marina on day five.' };
    messages[440] = { role: 'user', content: 'Marina.' };
    await t.app.store.appendMessages(session.id, messages);
    const maxSeq = 451;

    const found = await t.app.store.recallMessages(
      session.id,
      [term('ferry'), term('marina')],
      maxSeq,
      18,
    );
    expect(found.map((h) => h.seq).sort((a, b) => a - b)).toEqual([7, 442]);

    const { result, statements } = await counter.count(() =>
      t.app.store.recallMessages(session.id, [term('ferry'), term('weather')], maxSeq, 18),
    );
    expect(result).toEqual([]);
    expect(statements.postgres).toBe(1);
  });
});
