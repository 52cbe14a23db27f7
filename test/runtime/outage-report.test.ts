/**
 * What a turn that meets a database outage tells its caller: what of the turn
 * was stored, or that nothing was — never "nothing was saved" after its user
 * message and tool results were.
 */
import { describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import type { StoredMessage } from '../../src/llm/messages.js';
import { describeStored, reportOutage } from '../../src/runtime/outage-report.js';

const at = (seq: number, message: Omit<StoredMessage, 'session_id' | 'seq' | 'created_at'>) => ({
  ...message,
  session_id: 'sess_1',
  seq,
  created_at: '2026-01-01T00:00:00Z',
});

const USER = at(2, { role: 'user', content: 'What time is it?' });
const CALL = at(3, {
  role: 'assistant',
  content: null,
  tool_calls: [{ id: 'c1', type: 'function', function: { name: 'current_time', arguments: '{}' } }],
});
const RESULT = at(4, { role: 'tool', tool_call_id: 'c1', name: 'current_time', content: 'noon' });
const storeDown = new CairnError(
  'DATABASE_UNAVAILABLE',
  'The Postgres database cannot be reached; the write that met the outage was not saved. Retry when the database is back.',
);

describe('reportOutage', () => {
  it('names what the turn stored before the database went away', () => {
    const err = reportOutage(storeDown, [USER, CALL, RESULT]) as CairnError;
    expect(err.code).toBe('DATABASE_UNAVAILABLE');
    expect(err.message).toContain('sess_1: 1 user message, 1 tool call and 1 tool result');
    expect(err.message).not.toMatch(/nothing of this/i);
  });

  it('says nothing was saved only when the turn stored nothing', () => {
    const err = reportOutage(storeDown, []) as CairnError;
    expect(err.code).toBe('DATABASE_UNAVAILABLE');
    expect(err.message).toMatch(/nothing of this turn was saved/);
  });

  it('adds what was stored to a session lock lost with its connection', () => {
    const lost = new CairnError('SESSION_LOCK_LOST', 'The session lock was lost. Retry it.');
    const err = reportOutage(lost, [USER]) as CairnError;
    expect(err.code).toBe('SESSION_LOCK_LOST');
    expect(err.message).toMatch(
      /^The session lock was lost\. Retry it\. Already saved .*1 user message;/,
    );
    expect(reportOutage(lost, [])).toBe(lost);
  });

  it('leaves other errors alone', () => {
    const other = new CairnError('LLM_ERROR', 'The model failed.');
    expect(reportOutage(other, [USER])).toBe(other);
  });

  it('counts each kind of message', () => {
    expect(
      describeStored([USER, CALL, RESULT, RESULT, at(6, { role: 'assistant', content: 'Noon.' })]),
    ).toBe('1 user message, 1 tool call, 2 tool results and 1 assistant reply');
  });
});
