/**
 * Extracts the shell snippets (```sh and ```bash fences) of a markdown file
 * for the docs test. Markers on the non-blank lines right before a fence say
 * how the test treats it:
 *
 * - `<!-- docs-test: skip <reason> -->`: not run, because it cannot run
 *   against a test server (it installs, starts a server of its own, or needs a
 *   real provider); the reason is required, so nothing is skipped silently.
 * - `<!-- docs-test: expect-error <CODE> -->`: its point is showing an error,
 *   so a 4xx/5xx answer is what it should get, and its output must name that
 *   error code.
 *
 * And on a fence of another language after a snippet:
 *
 * - `<!-- docs-test: output -->`: this fence is what the snippet before it
 *   prints, word for word, so the test compares the two.
 */

export interface ShellSnippet {
  /** 1-based line of the opening fence. */
  line: number;
  code: string;
  /** Present when the snippet is marked to be skipped: the reason given. */
  skip?: string;
  /** Present when the snippet is marked as showing an error: the code its output names. */
  expectError?: string;
  /** Present when the fence after it is marked as its output: that fence's text. */
  output?: string;
}

const MARKER = /^<!--\s*docs-test:\s*(\S+)(.*?)-->\s*$/;

/** The markers on the non-blank lines right above line `index`, nearest last. */
function markersAbove(
  lines: string[],
  index: number,
): { line: number; kind: string; argument: string }[] {
  const markers = [];
  for (let before = index - 1; before >= 0; before--) {
    const text = lines[before]!.trim();
    if (text === '') continue;
    const marker = MARKER.exec(text);
    if (!marker) break;
    markers.unshift({ line: before + 1, kind: marker[1]!, argument: marker[2]!.trim() });
  }
  return markers;
}

export function shellSnippets(markdown: string): ShellSnippet[] {
  const lines = markdown.split('\n');
  const snippets: ShellSnippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end === -1) throw new Error(`line ${i + 1}: the fence is never closed`);
    const code = lines.slice(i + 1, end).join('\n');
    const shell = fence[1] === 'sh' || fence[1] === 'bash';
    const snippet: ShellSnippet = { line: i + 1, code };
    for (const { line, kind, argument } of markersAbove(lines, i)) {
      if (kind === 'output') {
        const before = snippets.at(-1);
        if (shell || !before) {
          throw new Error(`line ${line}: docs-test: output belongs above the output of a snippet`);
        }
        before.output = code;
      } else if (!shell) {
        throw new Error(`line ${line}: docs-test: ${kind} belongs above a sh or bash fence`);
      } else if (kind === 'skip') {
        if (!argument) throw new Error(`line ${line}: docs-test: skip needs a reason`);
        snippet.skip = argument;
      } else if (kind === 'expect-error') {
        if (!/^[A-Z][A-Z0-9_]*$|^-?\d+$/.test(argument)) {
          throw new Error(`line ${line}: docs-test: expect-error needs one error code`);
        }
        snippet.expectError = argument;
      } else {
        throw new Error(`line ${line}: unknown marker docs-test: ${kind}`);
      }
    }
    if (shell) snippets.push(snippet);
    i = end;
  }
  return snippets;
}
