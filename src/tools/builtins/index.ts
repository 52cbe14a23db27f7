/**
 * The built-in tools by name: one list, used by the server and by
 * `cairn agents validate`, so both resolve an agent's tools the same way.
 */
import type { BuiltinFactory } from '../tool-catalog.js';
import { askUserTool } from './ask-user.js';
import { currentTimeTool } from './current-time.js';
import { historySearchTool } from './history-search.js';
import { memoryTools } from './memory.js';

export function builtinTools(): Readonly<Record<string, BuiltinFactory>> {
  return {
    current_time: () => currentTimeTool(),
    history_search: () => historySearchTool(),
    ask_user: () => askUserTool(),
    memory: (agent) => memoryTools(agent),
  };
}
