/**
 * The name the model sees for an MCP tool: `<server>__<tool>`, made to fit
 * OpenAI's `^[a-zA-Z0-9_-]{1,64}$` (other providers accept the same subset).
 */
import { createHash } from 'node:crypto';

export const MODEL_TOOL_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;
const MAX_NAME_CHARS = 64;
/** Kept from a hash of the full name when it must be cut, so two long names stay distinct. */
const HASH_CHARS = 8;

/**
 * `files` + `read_text_file` → `files__read_text_file`. Characters outside the
 * pattern (MCP allows `.` and `/`) become `_`; a name longer than 64 is cut and
 * ends with a short hash of the whole name.
 */
export function modelToolName(server: string, tool: string): string {
  const full = `${server}__${tool}`;
  const safe = full.replace(/[^a-zA-Z0-9_-]/g, '_');
  if (safe.length <= MAX_NAME_CHARS) return safe;
  const hash = createHash('sha256').update(full).digest('hex').slice(0, HASH_CHARS);
  return `${safe.slice(0, MAX_NAME_CHARS - HASH_CHARS - 1)}_${hash}`;
}
