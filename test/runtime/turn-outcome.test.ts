/** How a turn ended, resolved once: each loop result and each kind of error to its outcome. */
import { describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import type { ToolCall } from '../../src/llm/messages.js';
import {
  impossibleOutcome,
  outcomeOf,
  outcomeOfError,
  publicOutcome,
  stopError,
  throwIfStopped,
  unreachableOutcome,
  type TurnOutcome,
} from '../../src/runtime/turn-outcome.js';

const usage = { input_tokens: 3, output_tokens: 2 };
const call: ToolCall = {
  id: 'c1',
  type: 'function',
  function: { name: 'launch', arguments: '{}' },
};

describe('outcomeOf', () => {
  it('maps each way the loop returns', () => {
    expect(outcomeOf({ kind: 'answer', reply: 'hi', usage })).toEqual({
      kind: 'reply',
      reply: 'hi',
    });
    expect(outcomeOf({ kind: 'waiting', question: 'Which?', callId: 'c0', usage })).toEqual({
      kind: 'question',
      question: 'Which?',
      callId: 'c0',
    });
    expect(
      outcomeOf({ kind: 'pending', reason: 'approval', call, usage, approvalTimeout: '5m' }),
    ).toEqual({ kind: 'approval', call, approvalTimeout: '5m' });
    // No timeout, no key: the outcome says nothing of one.
    expect(outcomeOf({ kind: 'pending', reason: 'approval', call, usage })).toStrictEqual({
      kind: 'approval',
      call,
    });
    expect(outcomeOf({ kind: 'outside', reply: 'x', calls: [call], usage })).toEqual({
      kind: 'client-tools',
      reply: 'x',
      calls: [call],
    });
  });
});

describe('outcomeOfError', () => {
  it('an agent limit is a limit; anything else a failure', () => {
    const budget = new CairnError('BUDGET_EXCEEDED', 'spent');
    const iterations = new CairnError('MAX_ITERATIONS', 'too many');
    const lost = new CairnError('SESSION_LOCK_LOST', 'lost');
    const plain = new Error('boom');
    expect(outcomeOfError(budget)).toEqual({ kind: 'limit', error: budget });
    expect(outcomeOfError(iterations)).toEqual({ kind: 'limit', error: iterations });
    expect(outcomeOfError(lost)).toEqual({ kind: 'failed', error: lost });
    expect(outcomeOfError(plain)).toEqual({ kind: 'failed', error: plain });
  });

  it('a limit or failure rethrows its error; the other outcomes pass', () => {
    const lost = new CairnError('SESSION_LOCK_LOST', 'lost');
    const budget = new CairnError('BUDGET_EXCEEDED', 'spent');
    expect(() => throwIfStopped({ kind: 'failed', error: lost })).toThrow(lost);
    expect(() => throwIfStopped({ kind: 'limit', error: budget })).toThrow(budget);
    expect(stopError({ kind: 'failed', error: lost })).toBe(lost);
    expect(stopError({ kind: 'limit', error: budget })).toBe(budget);
    const passing: TurnOutcome[] = [
      { kind: 'reply', reply: 'ok' },
      { kind: 'question', question: 'q', callId: 'c' },
      { kind: 'held-question', question: 'q', callId: 'c' },
      { kind: 'approval', call },
      { kind: 'held-approval', call, task: { id: 'task_1', question: 'Approve?' } },
      { kind: 'client-tools', reply: '', calls: [call] },
    ];
    for (const outcome of passing) {
      expect(() => throwIfStopped(outcome)).not.toThrow();
      expect(stopError(outcome)).toBeUndefined();
    }
  });

  it('an outcome no switch knows is an internal error naming it', () => {
    expect(() => unreachableOutcome({ kind: 'new' } as never)).toThrow(
      'unknown turn outcome {"kind":"new"}',
    );
  });
});

describe('publicOutcome', () => {
  it('spells a held question or approval as the documented question or approval', () => {
    const task = { id: 'task_1', question: 'Approve?' };
    expect(publicOutcome({ kind: 'held-question', question: 'q', callId: 'c' })).toBe('question');
    expect(publicOutcome({ kind: 'held-approval', call, task })).toBe('approval');
    expect(publicOutcome({ kind: 'question', question: 'q', callId: 'c' })).toBe('question');
    expect(publicOutcome({ kind: 'approval', call })).toBe('approval');
    expect(publicOutcome({ kind: 'reply', reply: 'ok' })).toBe('reply');
    expect(publicOutcome({ kind: 'client-tools', reply: '', calls: [] })).toBe('client-tools');
  });
});

describe('impossibleOutcome', () => {
  it('is an internal error naming the outcome', () => {
    expect(() => impossibleOutcome({ kind: 'approval', call })).toThrow(
      'turn outcome "approval" cannot end a turn run this way',
    );
  });
});
