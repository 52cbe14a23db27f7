/**
 * The process's memory once it has been idle long enough for V8's memory
 * reducer to run: a collection that also gives back the young generation,
 * which start-up and load grow to its maximum (some 25–30 MB resident) and
 * a forced GC leaves as it is. That is what an idle server holds. Used by the
 * idle-RSS rows of `npm run bench` and by `idle-rss.js`.
 */
import v8 from 'node:v8';

/** How long to wait for the reducer (it ran 8–30 s after the last activity on this machine). */
export const IDLE_WAIT_MS = 40_000;
/** The young generation's resident size once the reducer has shrunk it (it was 0.5–1 MB). */
const REDUCED_YOUNG_BYTES = 2 * 1024 * 1024;

export interface IdleUsage {
  usage: NodeJS.MemoryUsage;
  /** Seconds of idleness before the reducer ran; null when it did not within IDLE_WAIT_MS. */
  reducedAfterS: number | null;
}

/** Polled, not slept for a fixed time: the reducer runs on V8's own timer. */
export async function usageWhenIdle(): Promise<IdleUsage> {
  const began = performance.now();
  const young = () =>
    v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')
      ?.physical_space_size ?? 0;
  let reducedAfterS: number | null = null;
  while (performance.now() - began < IDLE_WAIT_MS) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    if (young() < REDUCED_YOUNG_BYTES) {
      reducedAfterS = (performance.now() - began) / 1000;
      break;
    }
  }
  return { usage: process.memoryUsage(), reducedAfterS };
}
