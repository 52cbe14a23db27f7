/**
 * `cairn eval recall` as a user runs it: the compiled CLI in a folder made
 * by `cairn init`, the offline model, a data file in the documented format;
 * a question counts as found when its evidence is recalled or still in the
 * raw tail, and not otherwise; bad data and bad options exit 1 with a
 * message naming the problem. With an embed role (the fake provider's
 * `/v1/embeddings`, or the bundled local model) the eval embeds the seeded
 * messages and reports lexical and hybrid recall side by side: a
 * paraphrase lexical recall misses is found by hybrid recall.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { CLI_PATH } from '../process/spawn-server.js';

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function cairn(cwd: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI_PATH, ...args],
      { cwd, env: { PATH: process.env.PATH ?? '', ...env }, timeout: 120_000 },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? 1) : 0;
        resolve({ code: typeof code === 'number' ? code : 1, stdout, stderr });
      },
    );
  });
}

/**
 * 80 turns of filler (or `length`), a fact at turn 5 and another three turns before the end (in the raw
 * tail once 90 % is compacted), and questions: one about each fact, one
 * about nothing said, one whose evidence holds none of its words.
 */
function data(length = 80): unknown {
  const turns = Array.from({ length }, (_, i) => ({
    id: `D1:${i + 1}`,
    speaker: i % 2 === 0 ? 'Ana' : 'Bo',
    time: `2024-01-01T10:${String(i % 60).padStart(2, '0')}:00Z`,
    text: i % 2 === 0 ? `Chatting about little thing number ${i}.` : 'Nice, go on.',
  }));
  turns[4]!.text = 'The harbour crane is painted vermilion.';
  turns[length - 4]!.text = 'The ferry timetable changes in spring.';
  return {
    conversations: [
      {
        id: 'c1',
        user: 'Ana',
        turns,
        questions: [
          { question: 'What colour is the harbour crane?', evidence: ['D1:5'], category: 'plain' },
          {
            question: 'When does the timetable change?',
            evidence: [`D1:${length - 3}`],
            category: 'tail',
          },
          { question: 'Who won the chess final?', evidence: ['D1:5'], category: 'miss' },
          { question: 'Anything about cranes?', evidence: [], category: 'plain' },
        ],
      },
    ],
  };
}

/**
 * A fact compacted among filler, asked once in its own words and once in
 * other words that share only one of them (too few for lexical recall's
 * `minScore`), and a question about nothing said.
 */
function paraphraseData(): unknown {
  const turns = Array.from({ length: 40 }, (_, i) => ({
    id: `D1:${i + 1}`,
    speaker: i % 2 === 0 ? 'Ana' : 'Bo',
    time: '',
    text: `Filler message ${i} about the weather and lunch plans.`,
  }));
  turns[2]!.text = 'The deploy key rotates every 90 days, on the first Monday of the quarter.';
  return {
    conversations: [
      {
        id: 'c1',
        user: 'Ana',
        turns,
        questions: [
          {
            question: 'When does the deploy key rotate?',
            evidence: ['D1:3'],
            category: 'plain',
          },
          {
            question: 'How often do we change the deploy credentials?',
            evidence: ['D1:3'],
            category: 'paraphrase',
          },
          { question: 'Who won the chess final?', evidence: ['D1:3'], category: 'miss' },
        ],
      },
    ],
  };
}

interface ModeReport {
  categories: { category: string; foundAny: number; itemsPerQuestion: number }[];
  total: { questions: number; foundAny: number; msPerCall: number };
}

const found = (report: ModeReport) =>
  Object.fromEntries(report.categories.map((c) => [c.category, c.foundAny]));

describe('cairn eval recall', () => {
  let home: string;
  beforeAll(async () => {
    home = mkdtempSync(join(tmpdir(), 'cairn-eval-recall-cli-'));
    expect((await cairn(home, ['init', '.'])).code).toBe(0);
    writeFileSync(join(home, 'data.json'), JSON.stringify(data()));
  });
  afterAll(() => rmSync(home, { recursive: true, force: true }));

  it('reports found, items, tokens and time per category, as JSON', async () => {
    const run = await cairn(home, ['eval', 'recall', '--data', 'data.json', '--json']);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report).toMatchObject({ agent: 'assistant', model: 'offline', conversations: 1 });
    expect(report.skipped).toBe(1);
    expect(report.compacted.asked).toBe(0.9);
    expect(report.compacted.reached).toBeGreaterThanOrEqual(0.9);
    const byName = Object.fromEntries(
      report.categories.map((c: { category: string }) => [c.category, c]),
    );
    // Recalled: the crane's message comes back, and only it.
    expect(byName.plain).toMatchObject({ questions: 1, foundAny: 1, foundAll: 1 });
    expect(byName.plain.itemsPerQuestion).toBe(1);
    expect(byName.plain.tokensAdded).toBeGreaterThan(0);
    // Still in the raw tail: found with nothing recalled.
    expect(byName.tail).toMatchObject({ questions: 1, foundAny: 1, itemsPerQuestion: 0 });
    // Evidence compacted and not recalled: not found.
    expect(byName.miss).toMatchObject({ questions: 1, foundAny: 0, foundAll: 0 });
    expect(report.total).toMatchObject({ category: 'all', questions: 3, foundAny: 2 });
    expect(report.total.msPerCall).toBeGreaterThan(0);
    expect(run.stderr).toBe('');
  }, 120_000);

  it('stops at the asked share when a compaction stops short of it, not at everything', async () => {
    // 88 turns: the first compaction's cut, moved to a turn's start, stops
    // at 89.8 %; another at 90 % of the rest would compact everything and
    // put the tail's fact behind the pointer.
    writeFileSync(join(home, 'data-88.json'), JSON.stringify(data(88)));
    const run = await cairn(home, ['eval', 'recall', '--data', 'data-88.json', '--json']);
    expect(run.code, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(report.compacted.reached).toBeGreaterThanOrEqual(0.9);
    expect(report.compacted.reached).toBeLessThan(0.95);
    expect(found(report)).toMatchObject({ tail: 1 });
  }, 120_000);

  it('runs the conversation file shipped with Cairn by default, as a table', async () => {
    const run = await cairn(home, ['eval', 'recall', '--compacted', '0.8']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain(
      '| category | questions | found (any) | found (all) | items / question | tokens added | ms / call |',
    );
    expect(run.stdout).toMatch(/\| all \| \d+ \|/);
    expect(run.stdout).toContain('| paraphrase |');
  }, 120_000);

  it('refuses bad data and bad options with a message and exit status 1', async () => {
    const bad = (name: string, content: unknown) => {
      writeFileSync(join(home, name), JSON.stringify(content));
      return name;
    };
    const turn = { id: 'D1:1', speaker: 'Ana', time: '', text: 'hi' };
    for (const [args, message] of [
      [['--compacted', '1.5'], '--compacted must be a share between 0 and 1'],
      [['--data', 'missing.json'], '--data missing.json'],
      [['--data', bad('a.json', { talks: [] })], 'conversations must be an array'],
      [
        ['--data', bad('b.json', { conversations: [{ user: 'Ana', turns: [{ id: 'x' }] }] })],
        'conversations[0].turns[0].speaker must be a string',
      ],
      [
        [
          '--data',
          bad('c.json', {
            conversations: [
              {
                user: 'Ana',
                turns: [turn],
                questions: [{ question: 'q', evidence: ['D9:9'], category: 'plain' }],
              },
            ],
          }),
        ],
        'conversations[0].questions[0].evidence names no turn "D9:9"',
      ],
      [['--agent', 'nobody'], 'There is no agent "nobody"'],
    ] as const) {
      const run = await cairn(home, ['eval', 'recall', ...args]);
      expect(run.code, args.join(' ')).toBe(1);
      expect(run.stderr).toContain(message);
    }
  }, 120_000);

  describe('with an embed role', () => {
    let fake: FakeLlmServer;
    let embedHome: string;
    beforeAll(async () => {
      fake = await startFakeLlmServer();
      embedHome = mkdtempSync(join(tmpdir(), 'cairn-eval-recall-embed-'));
      expect((await cairn(embedHome, ['init', '.'])).code).toBe(0);
      const config = JSON.parse(readFileSync(join(embedHome, 'cairn.json'), 'utf8'));
      config.models = {
        embed: { baseURL: fake.baseURL, model: 'fake-embed', apiKeyEnv: 'FAKE_EMBED_KEY' },
      };
      writeFileSync(join(embedHome, 'cairn.json'), JSON.stringify(config));
      writeFileSync(join(embedHome, 'data.json'), JSON.stringify(paraphraseData()));
    });
    afterAll(async () => {
      await fake.close();
      rmSync(embedHome, { recursive: true, force: true });
    });

    it("embeds the seeded messages with cairn.json's role and reports lexical and hybrid side by side", async () => {
      const run = await cairn(embedHome, ['eval', 'recall', '--data', 'data.json', '--json'], {
        FAKE_EMBED_KEY: 'sk-test',
      });
      expect(run.code, run.stderr).toBe(0);
      const report = JSON.parse(run.stdout);
      expect(report.embed).toMatchObject({ provider: 'openai', model: 'fake-embed' });
      // The 40 seeded turns at least (compaction summaries are messages too).
      expect(report.embed.messages).toBeGreaterThanOrEqual(40);
      const embedded = fake.requests.filter((r) => r.path === '/v1/embeddings');
      expect(embedded.length).toBeGreaterThan(0);
      // Lexical: the question in the fact's words only.
      expect(found(report)).toEqual({ plain: 1, paraphrase: 0, miss: 0 });
      // Hybrid, same sessions and questions: the paraphrase too, and nothing for the miss.
      expect(found(report.hybrid)).toEqual({ plain: 1, paraphrase: 1, miss: 0 });
      expect(report.hybrid.total).toMatchObject({ questions: 3, foundAny: 2 });
      expect(report.hybrid.total.msPerCall).toBeGreaterThan(0);
    }, 120_000);

    it('prints both tables, and measures lexical recall alone with --embed none', async () => {
      const env = { FAKE_EMBED_KEY: 'sk-test' };
      const both = await cairn(embedHome, ['eval', 'recall', '--data', 'data.json'], env);
      expect(both.code, both.stderr).toBe(0);
      expect(both.stdout).toContain('embed openai fake-embed');
      expect(both.stdout).toMatch(/\nlexical\n\n\| category \|[^]*\nhybrid\n\n\| category \|/);
      expect(both.stdout.match(/\| paraphrase \|/g)).toHaveLength(2);
      const lexical = await cairn(
        embedHome,
        ['eval', 'recall', '--data', 'data.json', '--embed', 'none', '--json'],
        env,
      );
      expect(lexical.code, lexical.stderr).toBe(0);
      expect(JSON.parse(lexical.stdout)).toMatchObject({ embed: null, hybrid: null });
      const bad = await cairn(embedHome, ['eval', 'recall', '--embed', 'big'], env);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain('--embed must be "local"');
    }, 120_000);

    it('runs hybrid recall with the bundled local model (--embed local)', async () => {
      const run = await cairn(embedHome, [
        'eval',
        'recall',
        '--data',
        'data.json',
        '--embed',
        'local',
        '--json',
      ]);
      expect(run.code, run.stderr).toBe(0);
      const report = JSON.parse(run.stdout);
      expect(report.embed).toMatchObject({
        provider: 'local',
        model: 'universal-sentence-encoder-lite',
        dimensions: 512,
      });
      expect(report.embed.messages).toBeGreaterThanOrEqual(40);
      expect(found(report)).toEqual({ plain: 1, paraphrase: 0, miss: 0 });
      // What the real model finds is its own; never less than lexical recall, never the miss.
      expect(found(report.hybrid).plain).toBe(1);
      expect(found(report.hybrid).miss).toBe(0);
    }, 120_000);
  });
});
