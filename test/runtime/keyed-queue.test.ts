/**
 * KeyedQueue: work on one session runs FIFO and
 * never overlaps; a failure does not block what follows; other sessions run
 * in parallel.
 */
import { describe, expect, it } from 'vitest';
import { KeyedQueue } from '../../src/runtime/keyed-queue.js';

/** A promise with its resolvers, to hold work open until the test lets it go. */
function gate<T = void>() {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Lets queued microtasks and timers run. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe('KeyedQueue', () => {
  it('runs work on one key in FIFO order, one at a time', async () => {
    const queue = new KeyedQueue();
    const log: string[] = [];
    let running = 0;
    let maxRunning = 0;
    const job = (name: string, ticks: number) => async () => {
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      log.push(`start ${name}`);
      for (let i = 0; i < ticks; i++) await settle();
      log.push(`end ${name}`);
      running -= 1;
      return name;
    };
    const results = await Promise.all([
      queue.run('s', job('a', 3)),
      queue.run('s', job('b', 1)),
      queue.run('s', job('c', 2)),
    ]);
    expect(results).toEqual(['a', 'b', 'c']);
    expect(log).toEqual(['start a', 'end a', 'start b', 'end b', 'start c', 'end c']);
    expect(maxRunning).toBe(1);
  });

  it('does not start the next job before the current one settles', async () => {
    const queue = new KeyedQueue();
    const first = gate<string>();
    let secondStarted = false;
    const a = queue.run('s', () => first.promise);
    const b = queue.run('s', async () => {
      secondStarted = true;
      return 'b';
    });
    await settle();
    expect(secondStarted).toBe(false);
    first.resolve('a');
    await expect(a).resolves.toBe('a');
    await expect(b).resolves.toBe('b');
    expect(secondStarted).toBe(true);
  });

  it('passes a rejection to its caller and still runs the next job', async () => {
    const queue = new KeyedQueue();
    const failing = queue.run('s', async () => {
      throw new Error('boom');
    });
    const next = queue.run('s', async () => 'next ran');
    await expect(failing).rejects.toThrow('boom');
    await expect(next).resolves.toBe('next ran');
  });

  it('runs different keys in parallel', async () => {
    const queue = new KeyedQueue();
    const held = gate();
    const a = queue.run('one', () => held.promise);
    // If keys shared one queue, this would wait for `held` forever.
    await expect(queue.run('two', async () => 'two ran')).resolves.toBe('two ran');
    held.resolve();
    await a;
  });

  it('reports a key busy while work runs or waits, and idle after', async () => {
    const queue = new KeyedQueue();
    expect(queue.isBusy('s')).toBe(false);
    const first = gate();
    const second = gate();
    const a = queue.run('s', () => first.promise);
    const b = queue.run('s', () => second.promise);
    expect(queue.isBusy('s')).toBe(true);
    expect(queue.isBusy('other')).toBe(false);
    first.resolve();
    await a;
    await settle();
    expect(queue.isBusy('s')).toBe(true); // b still runs
    second.reject(new Error('fails'));
    await expect(b).rejects.toThrow('fails');
    await settle();
    expect(queue.isBusy('s')).toBe(false);
  });

  it('drain waits for everything queued, including work queued while draining', async () => {
    const queue = new KeyedQueue();
    const done: string[] = [];
    const held = gate();
    void queue.run('a', async () => {
      await held.promise;
      done.push('a1');
      // Queued from inside running work, after drain() started.
      void queue.run('b', async () => {
        await settle();
        done.push('b');
      });
    });
    const failed = queue
      .run('c', async () => {
        throw new Error('ignored by drain');
      })
      .then(
        () => 'resolved',
        (err: Error) => err.message,
      );
    let drained = false;
    const draining = queue.drain().then(() => {
      drained = true;
    });
    await settle();
    expect(drained).toBe(false);
    held.resolve();
    await draining;
    expect(await failed).toBe('ignored by drain');
    expect(done).toEqual(['a1', 'b']);
    expect(queue.isBusy('a')).toBe(false);
    expect(queue.isBusy('b')).toBe(false);
  });

  it('drain resolves at once when nothing is queued', async () => {
    await expect(new KeyedQueue().drain()).resolves.toBeUndefined();
  });
});
