/**
 * Built-in agent memory: `memory_save`, `memory_search`, `memory_delete` over
 * the agent's notes (shared by all its sessions, full-text searchable), and
 * the build-time injection of the newest notes into the system context.
 */
import type { AgentConfig } from '../../agents/agent-config.js';
import type { MemoryNote, Store } from '../../store/store.js';
import type { Tool } from '../tool.js';

export const MEMORY_KEY_PATTERN = '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$';
export const MEMORY_CONTENT_MAX_CHARS = 20_000;
const SEARCH_RESULTS = 10;

export function memoryTools(agent: AgentConfig): Tool[] {
  return [
    {
      name: 'memory_save',
      description:
        'Save or replace a note in your long-term memory under a short key. Notes persist across sessions.',
      parameters: {
        type: 'object',
        properties: {
          key: {
            type: 'string',
            pattern: MEMORY_KEY_PATTERN,
            description: 'Short identifier, e.g. "user.timezone".',
          },
          content: { type: 'string', minLength: 1, maxLength: MEMORY_CONTENT_MAX_CHARS },
        },
        required: ['key', 'content'],
        additionalProperties: false,
      },
      async run(args, ctx) {
        const note = await ctx.store.putMemory(agent.name, String(args.key), String(args.content));
        return `Saved note "${note.key}".`;
      },
    },
    {
      name: 'memory_search',
      description: 'Search your long-term memory notes by words.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', minLength: 1 } },
        required: ['query'],
        additionalProperties: false,
      },
      async run(args, ctx) {
        const notes = await ctx.store.listMemory(agent.name, String(args.query), SEARCH_RESULTS);
        if (notes.length === 0) return `No note matches "${String(args.query)}".`;
        return notes.map((n) => `${n.key}: ${n.content}`).join('\n');
      },
    },
    {
      name: 'memory_delete',
      description: 'Delete a note from your long-term memory by key.',
      parameters: {
        type: 'object',
        properties: { key: { type: 'string', pattern: MEMORY_KEY_PATTERN } },
        required: ['key'],
        additionalProperties: false,
      },
      async run(args, ctx) {
        const deleted = await ctx.store.deleteMemory(agent.name, String(args.key));
        return deleted
          ? `Deleted note "${String(args.key)}".`
          : `There is no note "${String(args.key)}".`;
      },
    },
  ];
}

/** The notes block for the system context: newest first, whole notes only, within maxChars. */
export function formatMemory(notes: readonly MemoryNote[], maxChars: number): string | undefined {
  const header = 'Notes from your long-term memory (newest first):';
  let text = header;
  for (const note of notes) {
    const line = `\n- ${note.key}: ${note.content}`;
    if (text.length + line.length > maxChars) break;
    text += line;
  }
  return text === header ? undefined : text;
}

/** Build-time memory injection for agents with `memory.enabled`. */
export function memoryContext(store: Store): (agent: AgentConfig) => Promise<string | undefined> {
  return async (agent) => {
    if (!agent.memory.enabled) return undefined;
    return formatMemory(await store.listMemory(agent.name), agent.memory.maxChars);
  };
}
