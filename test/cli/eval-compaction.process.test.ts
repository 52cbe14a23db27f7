/**
 * `cairn eval compaction` as a user runs it: the compiled CLI in a folder
 * made by `cairn init`, the offline model, a JSON report on stdout and no
 * progress bar when stderr is not a terminal; bad options exit 1 with a
 * message and touch no database.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI_PATH } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cairn(cwd: string, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { cwd, env: { PATH: process.env.PATH ?? '' }, timeout: 60_000 },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });
}

describe('cairn eval compaction', () => {
  let home: string;
  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'cairn-eval-cli-'));
    expect((await cairn(home, ['init', '.'])).code).toBe(0);
  });
  afterAll(() => rmSync(home, { recursive: true, force: true }));

  it('prints a JSON report per category, on a throwaway database', async () => {
    const run = await cairn(home, [
      'eval',
      'compaction',
      '--facts',
      '8',
      '--compactions',
      '3',
      '--seed',
      '5',
      '--json',
    ]);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ seed: 5, agent: 'assistant', model: 'offline', facts: 8 });
    expect(report.compactions).toBeGreaterThanOrEqual(2);
    expect(report.categories.map((c: { category: string }) => c.category)).toEqual([
      'plain',
      'updated',
      'instruction',
      'decision',
    ]);
    expect(report.total).toMatchObject({ facts: 8, answeredCorrectly: null });
    expect(report.total.presentWhenProbed).toBeGreaterThanOrEqual(report.total.keptInSummary);
    // Where each fact came from: the raw tail, the summary or recall alone, for both probes.
    const { inRawTail, keptInSummary, presentWhenProbed, foundOnlyByRecall } = report.total;
    expect(inRawTail).toBeGreaterThanOrEqual(1);
    expect(inRawTail).toBeLessThan(8);
    expect(foundOnlyByRecall).toBeLessThanOrEqual(presentWhenProbed);
    expect(inRawTail + keptInSummary + foundOnlyByRecall).toBeGreaterThanOrEqual(presentWhenProbed);
    expect(report.total.presentWhenParaphrased).toBeGreaterThanOrEqual(inRawTail);
    expect(report.total.foundOnlyByRecallParaphrased).toBeLessThanOrEqual(
      report.total.presentWhenParaphrased,
    );
    expect(report.failedCalls).toBe(0);
    expect(run.stderr).toBe(''); // no progress bar: stderr is not a terminal
    expect(existsSync(join(home, 'data', 'cairn.db'))).toBe(false);

    const again = await cairn(home, [
      'eval',
      'compaction',
      '--facts',
      '8',
      '--compactions',
      '3',
      '--seed',
      '5',
      '--json',
    ]);
    const { promptTokensPerTurn, total } = JSON.parse(again.stdout);
    expect({ promptTokensPerTurn, total }).toEqual({
      promptTokensPerTurn: report.promptTokensPerTurn,
      total: report.total,
    });
  }, 90_000);

  it('prints a table without --json', async () => {
    const run = await cairn(home, ['eval', 'compaction', '--facts', '4', '--compactions', '2']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      '| category | facts | in raw tail | kept in summary | in request when probed | only by recall | in request, paraphrased | only by recall, paraphrased | answered correctly |',
    );
    expect(run.stdout).toContain('| all | 4 |');
  }, 60_000);

  it('refuses bad options with a message and exit status 1', async () => {
    for (const [args, message] of [
      [['--facts', '0'], '--facts must be a whole number'],
      [['--compactions', 'many'], '--compactions must be a whole number'],
      [['--model-url', 'localhost:8000'], '--model-url must be an http(s) URL'],
      [['--agent', 'nobody'], 'There is no agent "nobody"'],
    ] as const) {
      const run = await cairn(home, ['eval', 'compaction', ...args]);
      expect(run.code, args.join(' ')).toBe(1);
      expect(run.stderr).toContain(message);
    }
  }, 60_000);
});
