/**
 * A call that waits for a person is never folded into the summary: while a
 * task waits for an ask_user answer or for approval, manual, dry-run and
 * automatic compaction all stop before the message that makes the call, so
 * the call and everything after it stay raw until the wait ends. Both dialects.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ChatMessage } from '../../src/llm/messages.js';
import {
  DATABASES,
  PATIENT_MS,
  startTestApp,
  TEST_AGENT,
  type TestApp,
} from '../helpers/test-app.js';
import { isSummaryRequest } from './summary-requests.js';

const APPROVED_TOOL = `export default {
  name: 'launch',
  description: 'Launches',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
  async run() { return 'launched'; },
};
`;

const AGENT = {
  ...TEST_AGENT,
  tools: ['ask_user', { tool: './tools/launch.js', approval: 'required' }],
};

function history(): ChatMessage[] {
  return Array.from({ length: 10 }, (_, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: `Earlier message ${i} `.padEnd(300, '.'),
  }));
}

describe.each(DATABASES)('a pending call stays raw (%s)', (database) => {
  let t: TestApp;
  const fake = () => t.fake!;
  const post = (url: string, payload?: object) =>
    t.app.server.inject({ method: 'POST', url, ...(payload ? { payload } : {}) });

  beforeAll(async () => {
    t = await startTestApp({
      database,
      agents: { assistant: AGENT },
      files: { 'agents/assistant/tools/launch.js': APPROVED_TOOL },
      mainModel: { timeoutMs: PATIENT_MS },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => {
    fake().reset();
    fake().setDefault((body) =>
      isSummaryRequest(body) ? { content: 'Earlier talk.' } : { content: 'done' },
    );
  });

  /** A session with history and a task waiting on a call; returns the call message's seq. */
  async function waiting(tool: 'ask_user' | 'launch') {
    const created = await post('/sessions', { agentName: 'assistant', compactCount: 99 });
    const sessionId = created.json().session.id as string;
    await t.app.store.appendMessages(sessionId, history());
    fake().script({
      tool_calls: [
        {
          name: tool,
          arguments: tool === 'ask_user' ? JSON.stringify({ question: 'Which one?' }) : '{}',
        },
      ],
    });
    const started = await post('/agents/assistant/tasks?wait=true', {
      input: 'Start now '.padEnd(300, '.'),
      sessionId,
    });
    const task = started.json().task as { id: string; status: string; pending_call_id: string };
    expect(task.status).toBe('waiting');
    const messages = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 100 });
    const call = messages.find((m) => m.tool_calls?.some((c) => c.id === task.pending_call_id));
    return { sessionId, task, callSeq: call!.seq };
  }

  for (const tool of ['ask_user', 'launch'] as const) {
    it(`${tool}: compaction stops before the waiting call, and folds it once the wait ended`, async () => {
      const { sessionId, task, callSeq } = await waiting(tool);
      const dry = await post(`/sessions/${sessionId}/compact`, { dryRun: true });
      expect(dry.statusCode).toBe(200);
      const compacted = await post(`/sessions/${sessionId}/compact`);
      expect(compacted.statusCode, compacted.body).toBe(200);
      const session = (await t.app.store.findSession(sessionId))!;
      expect(session.compact_seq).toBeGreaterThan(0);
      expect(session.compact_seq).toBeLessThan(callSeq);
      expect(dry.json().newSize).toBeLessThanOrEqual(session.compact_size);

      const ended =
        tool === 'ask_user'
          ? await post(`/tasks/${task.id}/resume?wait=true`, { answer: 'The blue one.' })
          : await post(`/tasks/${task.id}/approve?wait=true`);
      expect(ended.json().task.status, ended.body).toBe('completed');
      await post(`/sessions/${sessionId}/compact`);
      const after = (await t.app.store.findSession(sessionId))!;
      expect(after.compact_seq).toBeGreaterThanOrEqual(callSeq);
      for (const request of fake().requests) expect(request.problems).toEqual([]);
    });
  }
});
