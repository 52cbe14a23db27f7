/**
 * Following the newest message: while the reader is at the bottom of the
 * page, content that grows (a reply streaming in, a turn that lands) keeps
 * them at the bottom; once they scroll up to read, the page stays where they
 * put it until they come back down. A session opens at its newest message.
 */

/** How near the bottom still counts as at it: a line or so, and the rounding of zoomed pages. */
export const AT_BOTTOM_SLACK_PX = 48;

/** The scroll state of the page (`scrollTop` of the document, the window's height). */
export interface ScrollView {
  scrollTop: number;
  clientHeight: number;
  scrollHeight: number;
}

export function isAtBottom(view: ScrollView, slackPx = AT_BOTTOM_SLACK_PX): boolean {
  return view.scrollHeight - view.scrollTop - view.clientHeight <= slackPx;
}

/** Decides, as the reader scrolls and the content changes size, whether to follow. */
export class BottomFollower {
  /** Until the reader scrolls, the page follows: it opens at the newest message. */
  private following = true;

  /** The reader scrolled (or the page was scrolled for them): follow if they are at the bottom. */
  scrolled(view: ScrollView): void {
    this.following = isAtBottom(view);
  }

  /** The content changed size: the `scrollTop` to go to, or undefined to stay put. */
  resized(view: ScrollView): number | undefined {
    return this.following ? Math.max(0, view.scrollHeight - view.clientHeight) : undefined;
  }
}
