/**
 * Built-in `history_search`: full-text search over the session's raw
 * messages, compacted ones included, so an agent can recover a detail the
 * rolling summary dropped.
 */
import type { Tool } from '../tool.js';

export const HISTORY_SEARCH_LIMIT = 8;

export function historySearchTool(): Tool {
  return {
    name: 'history_search',
    description:
      'Searches every earlier message of this conversation, including parts replaced by the summary. Returns matching snippets with their message number (seq).',
    parameters: {
      type: 'object',
      properties: { query: { type: 'string', minLength: 1, description: 'Words to look for.' } },
      required: ['query'],
      additionalProperties: false,
    },
    async run(args, ctx) {
      const hits = await ctx.history.searchHistory(
        ctx.sessionId,
        String(args.query),
        HISTORY_SEARCH_LIMIT,
      );
      if (hits.length === 0) return `No earlier message matches "${String(args.query)}".`;
      return hits.map((h) => `#${h.seq} (${h.role}): ${h.snippet}`).join('\n');
    },
  };
}
