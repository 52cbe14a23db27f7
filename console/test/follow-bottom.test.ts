/** The session page follows a new reply while the reader is at the bottom, and stays put once they scroll up. */
import { describe, expect, it } from 'vitest';
import { AT_BOTTOM_SLACK_PX, BottomFollower, isAtBottom } from '../src/lib/follow-bottom';

/** A page 2 000 px tall in an 800 px window, scrolled to `scrollTop`. */
const view = (scrollTop: number, scrollHeight = 2000) => ({
  scrollTop,
  clientHeight: 800,
  scrollHeight,
});

describe('isAtBottom', () => {
  it('is true at the very bottom and within a little slack of it', () => {
    expect(isAtBottom(view(1200))).toBe(true);
    expect(isAtBottom(view(1200 - AT_BOTTOM_SLACK_PX))).toBe(true);
    expect(isAtBottom(view(1200 - AT_BOTTOM_SLACK_PX - 1))).toBe(false);
    expect(isAtBottom(view(0))).toBe(false);
  });

  it('is true for a page shorter than its window', () => {
    expect(isAtBottom({ scrollTop: 0, clientHeight: 800, scrollHeight: 500 })).toBe(true);
  });
});

describe('BottomFollower', () => {
  it('opens at the newest message', () => {
    expect(new BottomFollower().resized(view(0))).toBe(1200);
  });

  it('follows a reply that makes the page taller while the reader was at the bottom', () => {
    const follower = new BottomFollower();
    follower.scrolled(view(1200));
    expect(follower.resized(view(1200, 2600))).toBe(1800);
  });

  it('leaves a reader who scrolled up where they are, and follows again once they are back down', () => {
    const follower = new BottomFollower();
    follower.scrolled(view(300));
    expect(follower.resized(view(300, 2600))).toBeUndefined();
    follower.scrolled(view(1800, 2600));
    expect(follower.resized(view(1800, 3000))).toBe(2200);
  });
});
