/**
 * How deeply parsed JSON nests, and the one cap on it for request bodies.
 * JSON.parse itself copes with any depth, but much of what runs on a value
 * afterwards (validators, SDKs, structured clones) recurses, and a few
 * thousand levels overflow its stack: deep JSON is refused as it arrives.
 */

/** The deepest a request body (or an import line) may nest, objects and arrays counted. */
export const MAX_JSON_DEPTH = 64;

/**
 * The nesting depth of `value` (a scalar is 0, `{}` and `[]` are 1), counted
 * without recursion; the walk stops once it passes `limit`, returning
 * `limit + 1`.
 */
export function jsonDepth(value: unknown, limit: number = MAX_JSON_DEPTH): number {
  let deepest = 0;
  const pending: Array<[unknown, number]> = [[value, 1]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (typeof item !== 'object' || item === null) continue;
    if (depth > limit) return limit + 1;
    if (depth > deepest) deepest = depth;
    for (const child of Array.isArray(item) ? item : Object.values(item))
      if (typeof child === 'object' && child !== null) pending.push([child, depth + 1]);
  }
  return deepest;
}

/** The message a too-deep body is refused with, on every route and protocol. */
export function tooDeepMessage(what: string): string {
  return `${what} nests deeper than ${MAX_JSON_DEPTH} levels of objects and arrays.`;
}
