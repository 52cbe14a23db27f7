import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { joinSignals, linkAbort, NEVER_ABORTED } from '../../src/llm/abort-link.js';

describe('linkAbort', () => {
  it('aborts when any source aborts, with that source’s reason', () => {
    const a = new AbortController();
    const b = new AbortController();
    const link = linkAbort(a.signal, undefined, b.signal);
    expect(link.signal.aborted).toBe(false);
    b.abort(new Error('client went away'));
    expect(link.signal.aborted).toBe(true);
    expect((link.signal.reason as Error).message).toBe('client went away');
    expect(a.signal.aborted).toBe(false);
  });

  it('starts aborted when a source already is', () => {
    const a = new AbortController();
    a.abort('gone');
    expect(linkAbort(a.signal).signal.reason).toBe('gone');
  });

  it('aborts itself without touching its sources', () => {
    const a = new AbortController();
    const link = linkAbort(a.signal);
    link.abort('deadline');
    expect(link.signal.reason).toBe('deadline');
    expect(a.signal.aborted).toBe(false);
  });

  it('leaves no listener on its sources once disposed', () => {
    const a = new AbortController();
    const link = linkAbort(a.signal);
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(1);
    link.dispose();
    expect(getEventListeners(a.signal, 'abort')).toHaveLength(0);
    a.abort('late');
    expect(link.signal.aborted).toBe(false);
  });

  it('adds no listener to the shared signal that never aborts', () => {
    const a = new AbortController();
    const link = linkAbort(a.signal, NEVER_ABORTED);
    expect(getEventListeners(NEVER_ABORTED, 'abort')).toHaveLength(0);
    a.abort('stop');
    expect(link.signal.reason).toBe('stop');
    link.dispose();
  });
});

describe('joinSignals', () => {
  it('hands on the one signal that can abort as it is, with nothing attached to it', () => {
    const caller = new AbortController();
    const joined = joinSignals(caller.signal, NEVER_ABORTED);
    expect(joined.signal).toBe(caller.signal);
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
    joined.dispose();
    caller.abort('gone');
    expect(joined.signal.reason).toBe('gone');
  });

  it('is the signal that never aborts when no source can', () => {
    expect(joinSignals(undefined, NEVER_ABORTED).signal).toBe(NEVER_ABORTED);
    expect(joinSignals().signal).toBe(NEVER_ABORTED);
  });

  it('links two that can abort: either aborts it, and dispose detaches from both', () => {
    const caller = new AbortController();
    const lock = new AbortController();
    const joined = joinSignals(caller.signal, lock.signal);
    expect(joined.signal).not.toBe(caller.signal);
    lock.abort(new Error('lock lost'));
    expect((joined.signal.reason as Error).message).toBe('lock lost');
    const again = joinSignals(caller.signal, new AbortController().signal);
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(2);
    joined.dispose();
    again.dispose();
    expect(getEventListeners(caller.signal, 'abort')).toHaveLength(0);
  });
});
