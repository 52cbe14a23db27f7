/**
 * Turns an MCP `tools/call` result into the text a tool message carries:
 * text joined, structured content as JSON, images, audio and embedded
 * resources summarised (type and size) so the model knows they were there.
 */

/** An MCP result longer than this is clipped in the middle (head and tail kept). */
export const MCP_RESULT_MAX_CHARS = 16_000;

interface ContentItem {
  type: string;
  text?: string;
  data?: string;
  mimeType?: string;
  uri?: string;
  name?: string;
  resource?: { uri?: string; mimeType?: string; text?: string; blob?: string };
}

export interface McpCallResult {
  content?: unknown;
  structuredContent?: unknown;
  isError?: boolean;
}

/** Bytes encoded by a base64 string, without decoding it. */
function base64Bytes(data: string): number {
  const padding = data.endsWith('==') ? 2 : data.endsWith('=') ? 1 : 0;
  return Math.max(0, Math.floor((data.length * 3) / 4) - padding);
}

function describeItem(item: ContentItem): string {
  switch (item.type) {
    case 'text':
      return item.text ?? '';
    case 'image':
    case 'audio':
      return `[${item.type} ${item.mimeType ?? 'of unknown type'}, ${base64Bytes(item.data ?? '')} bytes, not shown]`;
    case 'resource_link':
      return `[resource link ${item.uri ?? ''}${item.name ? ` (${item.name})` : ''}${item.mimeType ? `, ${item.mimeType}` : ''}]`;
    case 'resource': {
      const r = item.resource ?? {};
      if (typeof r.text === 'string') return `[resource ${r.uri ?? ''}]\n${r.text}`;
      return `[resource ${r.uri ?? ''}, ${r.mimeType ?? 'binary'}, ${base64Bytes(r.blob ?? '')} bytes, not shown]`;
    }
    default:
      return `[${item.type} content, not shown]`;
  }
}

function sameJson(text: string, value: unknown): boolean {
  try {
    return JSON.stringify(JSON.parse(text)) === JSON.stringify(value);
  } catch {
    return false;
  }
}

/**
 * Servers are asked to repeat structured content as text: either as its JSON,
 * or (like the filesystem server's `{content: "..."}`) as the strings it holds.
 */
function repeatedAsText(structured: unknown, texts: readonly string[]): boolean {
  if (texts.some((text) => sameJson(text, structured))) return true;
  if (typeof structured !== 'object' || structured === null || Array.isArray(structured))
    return false;
  const values = Object.values(structured);
  const joined = texts.join('\n');
  return values.length > 0 && values.every((v) => typeof v === 'string' && joined.includes(v));
}

export function clipMiddle(text: string, max: number): string {
  if (text.length <= max) return text;
  const keep = Math.floor((max - 60) / 2);
  return `${text.slice(0, keep)}\n[… ${text.length - 2 * keep} characters omitted …]\n${text.slice(-keep)}`;
}

/** The result as one text, clipped to `MCP_RESULT_MAX_CHARS`. */
export function formatMcpResult(result: McpCallResult): string {
  const items = (Array.isArray(result.content) ? result.content : []) as ContentItem[];
  const parts = items.map(describeItem);
  const structured = result.structuredContent;
  const texts = items.filter((i) => i.type === 'text').map((i) => i.text ?? '');
  // Say it once: the model needs no second copy of what the text already holds.
  if (structured !== undefined && !repeatedAsText(structured, texts)) {
    parts.push(JSON.stringify(structured));
  }
  return clipMiddle(parts.filter((p) => p !== '').join('\n'), MCP_RESULT_MAX_CHARS);
}
