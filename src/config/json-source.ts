/**
 * A configuration file's JSON text, read so that every problem found in it
 * can be shown at its line and column: a syntax error where the parser
 * stopped, a schema problem at the value its JSON pointer names. JSON.parse
 * decides what is valid and gives the value; jsonc-parser (in its strict mode:
 * no comments, no trailing commas) only says where things are.
 */
import { parseTree, type Node, type ParseError } from 'jsonc-parser';

/** 1-based, as editors and compilers print them (`file:line:column`). */
export interface SourcePosition {
  readonly line: number;
  readonly column: number;
}

export type ParsedJson =
  | { readonly value: unknown; readonly source: JsonSource }
  | { readonly error: string; readonly position: SourcePosition };

/** Parses `text`: the value and its source map, or the syntax error with where it is. */
export function parseJsonSource(text: string): ParsedJson {
  const errors: ParseError[] = [];
  const tree = parseTree(text, errors, { disallowComments: true, allowTrailingComma: false });
  const lines = lineStarts(text);
  try {
    const value: unknown = JSON.parse(text);
    return { value, source: new JsonSource(tree, lines) };
  } catch (err) {
    // Both parsers stop at the same place; if ever they disagree, the end of the text is shown.
    const offset = errors[0]?.offset ?? text.length;
    return { error: syntaxMessage(err), position: positionAt(lines, offset) };
  }
}

/** Where the values of one parsed document sit in its text. */
export class JsonSource {
  constructor(
    private readonly root: Node | undefined,
    private readonly lines: readonly number[],
  ) {}

  /**
   * The position of the value at `pointer` (`''` is the document); with `key`,
   * of that property's name in the object at `pointer`. A pointer that goes
   * further than the document gives its deepest existing part.
   */
  positionOf(pointer: string, key?: string): SourcePosition {
    let node = this.root;
    for (const segment of pointerSegments(pointer)) {
      const child = node && childOf(node, segment);
      if (child === undefined) break;
      node = child;
    }
    const keyNode = key !== undefined && node ? propertyOf(node, key)?.children?.[0] : undefined;
    return positionAt(this.lines, (keyNode ?? node)?.offset ?? 0);
  }
}

/** `/a/b~1c/0` → ['a', 'b/c', '0'] (RFC 6901). */
function pointerSegments(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function childOf(node: Node, segment: string): Node | undefined {
  if (node.type === 'array') return /^\d+$/.test(segment) ? node.children?.[+segment] : undefined;
  return propertyOf(node, segment)?.children?.[1];
}

/** The property `key` of an object node: the last one, as JSON.parse keeps the last of a repeated key. */
function propertyOf(node: Node, key: string): Node | undefined {
  if (node.type !== 'object') return undefined;
  return node.children?.findLast((p) => p.children?.[0]?.value === key);
}

/** The offset at which each line starts. */
function lineStarts(text: string): number[] {
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text[i] === '\n') starts.push(i + 1);
  return starts;
}

function positionAt(lines: readonly number[], offset: number): SourcePosition {
  let low = 0;
  let high = lines.length - 1;
  while (low < high) {
    const mid = (low + high + 1) >> 1;
    if (lines[mid]! <= offset) low = mid;
    else high = mid - 1;
  }
  return { line: low + 1, column: offset - lines[low]! + 1 };
}

/** JSON.parse's message without its character offset (the line and column replace it). */
function syntaxMessage(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/ in JSON at position \d+(?: \(line \d+ column \d+\))?/, '');
}
