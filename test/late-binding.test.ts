/**
 * The port the composition root uses to break a real cycle: a call before
 * the target is bound, or a second bind, is a wiring mistake that fails loudly.
 */
import { describe, expect, it } from 'vitest';
import { LateBinding } from '../src/late-binding.js';

describe('LateBinding', () => {
  it('gives the target it was bound to', () => {
    const port = new LateBinding<{ answer: number }>('the answer');
    const target = { answer: 42 };
    port.bind(target);
    expect(port.get()).toBe(target);
  });

  it('throws, naming the target, when used before it is bound', () => {
    const port = new LateBinding<object>('TaskRunner (for approval timeouts)');
    expect(() => port.get()).toThrow(/TaskRunner \(for approval timeouts\) was used before/);
  });

  it('refuses a second bind', () => {
    const port = new LateBinding<object>('Subagents');
    port.bind({});
    expect(() => port.bind({})).toThrow(/already bound/);
  });
});
