/**
 * MCP progress notifications for one `chat_with_*` call whose client sent a
 * `progressToken`: one when the turn starts, one per tool call and tool
 * result, one when the agent starts writing, and a heartbeat while nothing
 * else happens (a long model call), so a client that resets its request
 * timeout on progress does not give up on a slow turn. `progress` counts the
 * notifications: it only grows, as MCP requires; there is no `total`.
 */
import type { ProgressNotification } from '@modelcontextprotocol/sdk/types.js';
import type { LoopEvent } from '../runtime/loop.js';

/** How often a running turn with nothing else to report says it is still working. */
export const PROGRESS_HEARTBEAT_MS = 5_000;

export type SendProgress = (notification: ProgressNotification) => Promise<void>;

export class TurnProgress {
  private count = 0;
  private writing = false;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly token: string | number,
    private readonly send: SendProgress,
    agentName: string,
    heartbeatMs = PROGRESS_HEARTBEAT_MS,
  ) {
    this.notify(`The agent "${agentName}" is working.`);
    this.heartbeat = setInterval(() => this.notify('Still working.'), heartbeatMs);
    this.heartbeat.unref();
  }

  /** The turn's events as progress (text deltas only announce that writing began). */
  readonly onEvent = (event: LoopEvent | { type: 'session'; sessionId: string }): void => {
    switch (event.type) {
      case 'delta':
        if (!this.writing) this.notify('Writing the reply.');
        this.writing = true;
        return;
      case 'tool_call':
        this.writing = false;
        this.notify(`Calling the tool ${event.call.function.name}.`);
        return;
      case 'tool_result':
        this.notify(`The tool ${event.name} ${event.isError ? 'failed' : 'finished'}.`);
        return;
      case 'session':
        return;
    }
  };

  stop(): void {
    clearInterval(this.heartbeat);
  }

  private notify(message: string): void {
    this.heartbeat?.refresh();
    this.count += 1;
    // A client that went away cannot be told; the turn goes on regardless.
    this.send({
      method: 'notifications/progress',
      params: { progressToken: this.token, progress: this.count, message },
    }).catch(() => undefined);
  }
}
