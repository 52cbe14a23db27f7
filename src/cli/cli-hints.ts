/**
 * The server's error messages end with advice for an HTTP client ("List
 * sessions with GET /sessions."). Printed by the CLI, that advice is restated
 * as what to type at the terminal, or where in the console to do it where the
 * CLI has no command for it.
 */

interface Rewrite {
  pattern: RegExp;
  replace: (server: string, ...groups: string[]) => string;
}

const REWRITES: readonly Rewrite[] = [
  {
    pattern: /List sessions with GET \/sessions\./g,
    replace: () => 'List sessions with `cairn sessions`.',
  },
  {
    pattern: /Use POST \/agents\/([^/\s]+)\/chat\./g,
    replace: (_server, agent) => `Use \`cairn chat ${agent} --session <id>\`.`,
  },
  {
    pattern: /(?:check|see|list them with) GET \/agents\b/g,
    replace: () => 'check `cairn agents validate` on the server',
  },
  {
    pattern:
      /(Approve|Answer|Resume|Deny|Cancel) it with POST \/tasks\/\S+?\/(approve|resume|deny|cancel)(?: \(or deny it with POST \/tasks\/\S+?\/deny\))?(?:, or deny it with POST \/tasks\/\S+?\/deny)?\./g,
    replace: (server) => `Do it in the console's Tasks page: ${server}/console/tasks.`,
  },
  {
    pattern: /GET \/sessions\/(\S+?)\/messages/g,
    replace: (server, id) => `the console (${server}/console/sessions/${id})`,
  },
];

/** `message` with the HTTP advice of the server it came from (`server`, its base URL) put in CLI terms. */
export function forTheTerminal(message: string, server: string): string {
  return REWRITES.reduce(
    (text, { pattern, replace }) =>
      // The callback gets the match, the groups, then the offset and the whole text.
      text.replace(pattern, (_match, ...rest: unknown[]) =>
        replace(server, ...rest.slice(0, -2).map((g) => (typeof g === 'string' ? g : ''))),
      ),
    message,
  );
}
