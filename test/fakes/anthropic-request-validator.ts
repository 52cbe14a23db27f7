/**
 * The rules the Anthropic Messages API enforces on a request body, as the
 * fake Anthropic server applies them (and the wire property test checks):
 * every rule here is one the real API answers with 400 invalid_request_error.
 * Returns the problems found; an empty list means the request is accepted.
 */

const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;
/** The API refuses a request with more blocks than this carrying `cache_control`. */
export const MAX_CACHE_CONTROL_BLOCKS = 4;

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A message's content as blocks (a string is one text block). */
export function contentBlocks(content: unknown): Json[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? content.filter(isRecord) : [];
}

export function validateAnthropicRequest(body: unknown): string[] {
  const problems: string[] = [];
  if (!isRecord(body)) return ['body: must be a JSON object'];
  if (typeof body.model !== 'string' || body.model === '') problems.push('model: Field required');
  if (!Number.isInteger(body.max_tokens) || (body.max_tokens as number) < 1)
    problems.push('max_tokens: Field required (an integer ≥ 1)');
  if (
    body.temperature !== undefined &&
    (typeof body.temperature !== 'number' || body.temperature < 0 || body.temperature > 1)
  )
    problems.push('temperature: must be between 0 and 1');
  let cacheControls = 0;
  const countCache = (block: Json): void => {
    if (block.cache_control !== undefined && block.cache_control !== null) cacheControls += 1;
  };

  if (body.system !== undefined) {
    const system = contentBlocks(body.system);
    if (typeof body.system !== 'string' && !Array.isArray(body.system))
      problems.push('system: must be a string or a list of text blocks');
    system.forEach((block, i) => {
      countCache(block);
      if (block.type !== 'text') problems.push(`system.${i}: only text blocks are allowed`);
      else if (typeof block.text !== 'string' || block.text.trim() === '')
        problems.push(`system.${i}: text content blocks must contain non-whitespace text`);
    });
  }

  for (const [i, tool] of (Array.isArray(body.tools) ? body.tools : []).entries()) {
    if (!isRecord(tool)) {
      problems.push(`tools.${i}: must be an object`);
      continue;
    }
    countCache(tool);
    if (typeof tool.name !== 'string' || !TOOL_NAME.test(tool.name))
      problems.push(`tools.${i}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`);
    if (!isRecord(tool.input_schema) || tool.input_schema.type !== 'object')
      problems.push(`tools.${i}.input_schema: type must be "object"`);
  }

  const messages = Array.isArray(body.messages) ? body.messages : undefined;
  if (!messages || messages.length === 0) {
    problems.push('messages: at least one message is required');
    return problems;
  }
  const seenToolUse = new Set<string>();
  let previous: { role: string; toolUses: string[] } | undefined;
  for (const [i, raw] of messages.entries()) {
    const at = `messages.${i}`;
    if (!isRecord(raw)) {
      problems.push(`${at}: must be an object`);
      continue;
    }
    const role = raw.role;
    if (role === 'system') {
      problems.push(
        `${at}: Unexpected role "system". The Messages API accepts a top-level \`system\` parameter, not "system" as an input message role.`,
      );
      continue;
    }
    if (role !== 'user' && role !== 'assistant') {
      problems.push(`${at}.role: Input should be 'user' or 'assistant'`);
      continue;
    }
    if (i === 0 && role !== 'user')
      problems.push(`${at}: the first message must use the "user" role`);
    if (previous && previous.role === role)
      problems.push(`${at}: roles must alternate between "user" and "assistant"`);
    if (typeof raw.content !== 'string' && !Array.isArray(raw.content))
      problems.push(`${at}.content: must be a string or a list of blocks`);
    const blocks = contentBlocks(raw.content);
    if (blocks.length === 0) problems.push(`${at}: all messages must have non-empty content`);

    const toolUses: string[] = [];
    const results = new Set<string>();
    let sawOther = false;
    for (const [j, block] of blocks.entries()) {
      const where = `${at}.content.${j}`;
      countCache(block);
      switch (block.type) {
        case 'text':
          if (typeof block.text !== 'string' || block.text.trim() === '')
            problems.push(`${where}: text content blocks must contain non-whitespace text`);
          sawOther = true;
          break;
        case 'tool_use':
          if (role !== 'assistant')
            problems.push(`${where}: tool_use blocks are only allowed in assistant messages`);
          if (typeof block.id !== 'string' || !TOOL_USE_ID.test(block.id))
            problems.push(`${where}.id: String should match pattern '^[a-zA-Z0-9_-]+$'`);
          else if (seenToolUse.has(block.id))
            problems.push(`${where}: \`tool_use\` ids must be unique (${block.id})`);
          else seenToolUse.add(block.id);
          if (typeof block.name !== 'string' || block.name === '')
            problems.push(`${where}.name: Field required`);
          if (!isRecord(block.input))
            problems.push(`${where}.input: Input should be a valid dictionary`);
          toolUses.push(String(block.id));
          break;
        case 'tool_result': {
          if (role !== 'user')
            problems.push(`${where}: tool_result blocks are only allowed in user messages`);
          if (sawOther)
            problems.push(
              `${where}: tool_result blocks must come before any other content in a user message`,
            );
          const id = String(block.tool_use_id);
          if (!previous || previous.role !== 'assistant' || !previous.toolUses.includes(id))
            problems.push(
              `${where}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
            );
          results.add(id);
          if (typeof block.content === 'string' && block.content.trim() === '')
            problems.push(`${where}: tool_result content must contain non-whitespace text`);
          for (const [k, part] of contentBlocks(
            Array.isArray(block.content) ? block.content : [],
          ).entries())
            if (part.type === 'text' && (typeof part.text !== 'string' || part.text.trim() === ''))
              problems.push(
                `${where}.content.${k}: text content blocks must contain non-whitespace text`,
              );
          break;
        }
        case 'image':
          if (role !== 'user')
            problems.push(`${where}: image blocks are only allowed in user messages`);
          sawOther = true;
          break;
        default:
          problems.push(`${where}.type: unsupported block type ${String(block.type)}`);
      }
    }
    if (previous?.role === 'assistant' && previous.toolUses.length > 0) {
      const missing = previous.toolUses.filter((id) => !results.has(id));
      if (role !== 'user' || missing.length > 0)
        problems.push(
          `messages.${i - 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
        );
    }
    previous = { role, toolUses };
  }
  if (previous?.role === 'assistant') {
    if (previous.toolUses.length > 0)
      problems.push(
        `messages.${messages.length - 1}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${previous.toolUses.join(', ')}.`,
      );
    const last = contentBlocks((messages.at(-1) as Json).content).at(-1);
    if (last?.type === 'text' && typeof last.text === 'string' && last.text !== last.text.trimEnd())
      problems.push('final assistant content cannot end with trailing whitespace');
  }
  if (cacheControls > MAX_CACHE_CONTROL_BLOCKS)
    problems.push(
      `A maximum of ${MAX_CACHE_CONTROL_BLOCKS} blocks with cache_control may be provided. Found ${cacheControls}.`,
    );
  return problems;
}
