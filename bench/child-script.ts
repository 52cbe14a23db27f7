/**
 * Runs a compiled bench script (dist-bench/bench/*.js) in its own process, so
 * its work (the fake model, seeding) never shows in the measured process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const BENCH_DIST = new URL('./', import.meta.url);

/** Starts `script` and resolves `line` with the first line it prints on stdout. */
export function startScript(
  script: string,
  args: string[],
): { child: ChildProcess; line: Promise<string> } {
  const child = spawn(process.execPath, [fileURLToPath(new URL(script, BENCH_DIST)), ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      const end = out.indexOf('\n');
      if (end >= 0) resolve(out.slice(0, end));
    });
    child.once('exit', (code) => reject(new Error(`${script} exited with code ${code}`)));
  });
  return { child, line };
}
