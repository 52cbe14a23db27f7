/**
 * Extracts the shell snippets (```sh and ```bash fences) of a markdown file
 * for the docs test. A snippet that cannot run against a test server (it
 * installs, starts a server of its own, or needs a real provider) is marked on
 * the last non-blank line before its fence with `<!-- docs-test: skip <reason> -->`; the
 * reason is required, so nothing is skipped silently.
 */

export interface ShellSnippet {
  /** 1-based line of the opening fence. */
  line: number;
  code: string;
  /** Present when the snippet is marked to be skipped: the reason given. */
  skip?: string;
}

const SKIP_MARKER = /^<!--\s*docs-test:\s*skip\b(.*?)-->\s*$/;

export function shellSnippets(markdown: string): ShellSnippet[] {
  const lines = markdown.split('\n');
  const snippets: ShellSnippet[] = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\w*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const end = lines.findIndex((line, j) => j > i && line.startsWith('```'));
    if (end === -1) throw new Error(`line ${i + 1}: the fence is never closed`);
    if (fence[1] === 'sh' || fence[1] === 'bash') {
      let before = i - 1;
      while (before >= 0 && lines[before]!.trim() === '') before--;
      const marker = SKIP_MARKER.exec(lines[before]?.trim() ?? '');
      const reason = marker?.[1]?.trim();
      if (marker && !reason) throw new Error(`line ${i}: docs-test: skip needs a reason`);
      snippets.push({
        line: i + 1,
        code: lines.slice(i + 1, end).join('\n'),
        ...(reason ? { skip: reason } : {}),
      });
    }
    i = end;
  }
  return snippets;
}
