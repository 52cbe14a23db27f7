/**
 * MCP servers describe their tools' arguments with any JSON Schema; chat
 * providers accept less. OpenAI requires `parameters` to be an object schema
 * (`type: "object"`) and rejects `oneOf`/`anyOf`/`allOf`/`enum`/`not` at its
 * top level; Gemini-backed endpoints also reject `$schema`. The adapted schema
 * is what the model sees; Cairn still validates arguments with it.
 */

type JsonObject = Record<string, unknown>;

const TOP_LEVEL_REJECTED = ['oneOf', 'anyOf', 'allOf', 'not', 'enum', 'const'] as const;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Drops `$schema` everywhere: it names a dialect, and some providers refuse it anywhere. */
function withoutDialect(node: unknown, isPropertyMap = false): unknown {
  if (Array.isArray(node)) return node.map((item) => withoutDialect(item));
  if (!isObject(node)) return node;
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (!isPropertyMap && key === '$schema') continue;
    out[key] = withoutDialect(
      value,
      !isPropertyMap && (key === 'properties' || key === 'patternProperties'),
    );
  }
  return out;
}

/**
 * Makes an MCP `inputSchema` acceptable as a chat tool's `parameters`: always
 * a top-level `type: "object"` with `properties`; top-level combinators are
 * folded into the description of the object (the branches' properties are
 * merged in, none of them required), since the exact constraint cannot be expressed there.
 */
export function adaptInputSchema(input: unknown): JsonObject {
  const schema = isObject(input) ? (withoutDialect(input) as JsonObject) : {};
  const out: JsonObject = { ...schema, type: 'object' };
  const properties: JsonObject = isObject(schema['properties']) ? { ...schema['properties'] } : {};
  const notes: string[] = [];
  for (const key of TOP_LEVEL_REJECTED) {
    if (!(key in out)) continue;
    const value = out[key];
    delete out[key];
    if ((key === 'oneOf' || key === 'anyOf' || key === 'allOf') && Array.isArray(value)) {
      for (const branch of value) {
        if (!isObject(branch) || !isObject(branch['properties'])) continue;
        for (const [name, property] of Object.entries(branch['properties'])) {
          properties[name] ??= property;
        }
      }
    }
    notes.push(`${key}: ${JSON.stringify(value)}`);
  }
  out['properties'] = properties;
  if (notes.length > 0) {
    const description = typeof out['description'] === 'string' ? `${out['description']} ` : '';
    out['description'] = `${description}The arguments must also satisfy ${notes.join('; ')}.`;
  }
  return out;
}
