/** Built-in `current_time`: the server's clock, so agents need not guess the date. */
import type { Tool } from '../tool.js';

export function currentTimeTool(clock: () => Date = () => new Date()): Tool {
  return {
    name: 'current_time',
    description: 'Returns the current date and time (ISO 8601, UTC) and the server time zone.',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
    async run() {
      return {
        iso: clock().toISOString(),
        timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
      };
    },
  };
}
