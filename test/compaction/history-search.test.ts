/**
 * Recall of compacted detail: the built-in `history_search`
 * tool finds words in the session's raw messages, compacted ones included,
 * and returns snippets with their `#seq`, so an agent can recover what the
 * summary dropped — and only from its own session.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import {
  chatOn,
  seedSession,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest } from './summary-requests.js';

const SECRET = 'zebracorn42';

function conversation(): ChatMessage[] {
  return Array.from({ length: 12 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content:
      i === 2
        ? `The door code is ${SECRET}, please remember it. `.padEnd(200, '.')
        : `m${i} `.padEnd(200, '.'),
  }));
}

describe('history_search after compaction', () => {
  let t: TestApp;
  const fake = () => t.fake!;

  beforeAll(async () => {
    // The test agent's tools include history_search. Automatic recall is off:
    // this suite is about the tool, which must find what the request lacks.
    t = await startTestApp({
      agents: { assistant: { ...TEST_AGENT, defaultCompaction: { recall: { enabled: false } } } },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'The user shared a door code.' } : { content: 'ok' },
    );
  });

  const seeded = (messages: ChatMessage[]) => seedSession(t.app, messages);
  const chat = (id: string, message: string) => chatOn(t.app, id, message);

  const toolMessages = (index: number) =>
    (fake().requests[index]!.body.messages as { role: string; content: string }[]).filter(
      (m) => m.role === 'tool',
    );

  it('finds a word that only a compacted message holds, with its seq', async () => {
    const id = await seeded(conversation()); // the code is in seq 4
    // Another session with the same word must not leak into this one.
    await seeded([{ role: 'user', content: `${SECRET} from the other session` }]);
    const compacted = await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    expect(compacted.json()).toMatchObject({ compactedCount: 6 });
    const messages = (await t.app.server.inject({ url: `/sessions/${id}/messages` })).json()
      .messages;
    expect(messages.find((m: { seq: number }) => m.seq === 4)).toMatchObject({ compacted: true });

    fake().requests.length = 0;
    fake().script(
      { tool_calls: [{ name: 'history_search', arguments: JSON.stringify({ query: SECRET }) }] },
      { content: `The code was ${SECRET}.` },
    );
    const res = await chat(id, 'What was the door code?');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().reply).toBe(`The code was ${SECRET}.`);

    // The first request does not contain the word: it is only in the compacted message.
    expect(JSON.stringify(fake().requests[0]!.body.messages)).not.toContain(SECRET);
    expect(
      fake().requests[0]!.body.tools.map(
        (tool: { function: { name: string } }) => tool.function.name,
      ),
    ).toContain('history_search');
    const [result] = toolMessages(1);
    expect(result!.content).toMatch(new RegExp(`^#4 \\(user\\): .*\\[${SECRET}\\]`));
    expect(result!.content).not.toContain('other session');
    expect(result!.content.split('\n')).toHaveLength(1);
    for (const r of fake().requests) expect(r.problems).toEqual([]);
  });

  it('says so when nothing matches', async () => {
    const id = await seeded(conversation());
    await t.app.server.inject({ method: 'POST', url: `/sessions/${id}/compact` });
    fake().requests.length = 0;
    fake().script(
      { tool_calls: [{ name: 'history_search', arguments: '{"query":"platypus"}' }] },
      { content: 'Nothing found.' },
    );
    expect((await chat(id, 'Did I mention an animal?')).statusCode).toBe(200);
    const [result] = toolMessages(1);
    expect(result!.content).toBe('No earlier message matches "platypus".');
  });
});
