/**
 * For the `*-only` scripts: runs some rows of `npm run bench` alone, against
 * the bench's fake model in its own process, and prints them as the table does.
 */
import { startScript } from './child-script.js';

export async function printRowsOnly(rows: (baseURL: string) => Promise<string[][]>): Promise<void> {
  const fake = startScript('fake-model.js', []);
  try {
    const { baseURL } = JSON.parse(await fake.line) as { baseURL: string };
    const table = await rows(baseURL);
    console.log(
      [
        '| figure | value | budget | |',
        '|---|---|---|---|',
        ...table.map((r) => `| ${r.join(' | ')} |`),
      ].join('\n'),
    );
  } finally {
    fake.child.kill('SIGTERM');
  }
}
