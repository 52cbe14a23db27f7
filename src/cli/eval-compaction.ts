/**
 * `cairn eval compaction`: runs the compaction eval (src/eval/) in this
 * process, against the agents of the current folder, with the offline model
 * or any OpenAI-compatible model by URL, on a throwaway SQLite database (the
 * real one is never touched). Prints a table, or the report as JSON.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startApp } from '../app.js';
import {
  loadSettings,
  OFFLINE_MODEL_NAME,
  type ModelRoleSettings,
  type Settings,
} from '../config/settings.js';
import {
  formatEvalReport,
  runCompactionEval,
  type CompactionEvalReport,
} from '../eval/compaction-eval.js';
import type { ObservedCall } from '../llm/observed-model.js';
import { CliUsageError } from './client.js';

export interface EvalCompactionOptions {
  agent?: string;
  modelUrl?: string;
  facts?: string;
  compactions?: string;
  seed?: string;
  json?: boolean;
}

const DEFAULT_FACTS = 40;
const DEFAULT_COMPACTIONS = 10;
const DEFAULT_SEED = 1;
const BAR_WIDTH = 30;

function positiveInt(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 10_000) {
    throw new CliUsageError(`--${name} must be a whole number from 1 to 10000, got "${value}".`);
  }
  return n;
}

/** The settings of this folder, on a throwaway database, with the chosen model for both roles. */
export function evalSettings(settings: Settings, dir: string, modelUrl?: string): Settings {
  const role: ModelRoleSettings =
    modelUrl === undefined
      ? {
          ...settings.models.main,
          provider: 'offline',
          baseURL: null,
          model: OFFLINE_MODEL_NAME,
          apiKey: null,
        }
      : { ...settings.models.main, provider: 'openai', baseURL: modelUrl };
  return {
    ...settings,
    database: { ...settings.database, kind: 'sqlite', url: null, path: join(dir, 'eval.db') },
    models: { main: role, compact: role, title: role, embed: settings.models.embed },
  };
}

/** A one-line progress bar on stderr, only when stderr is a terminal (shared by the evals). */
export function progressBar(
  stream: NodeJS.WriteStream,
): ((done: number, total: number) => void) | undefined {
  if (stream.isTTY !== true) return undefined;
  return (done, total) => {
    const filled = Math.round((done / total) * BAR_WIDTH);
    stream.write(`\r[${'#'.repeat(filled)}${'.'.repeat(BAR_WIDTH - filled)}] ${done}/${total}`);
    if (done === total) stream.write('\n');
  };
}

export async function evalCompaction(
  options: EvalCompactionOptions,
): Promise<CompactionEvalReport> {
  const facts = positiveInt(options.facts, 'facts', DEFAULT_FACTS);
  const compactions = positiveInt(options.compactions, 'compactions', DEFAULT_COMPACTIONS);
  const seed = positiveInt(options.seed, 'seed', DEFAULT_SEED);
  if (options.modelUrl !== undefined && !/^https?:\/\//.test(options.modelUrl)) {
    throw new CliUsageError(`--model-url must be an http(s) URL, got "${options.modelUrl}".`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'cairn-eval-'));
  const calls: ObservedCall[] = [];
  try {
    const settings = evalSettings(loadSettings(), dir, options.modelUrl);
    const app = await startApp(settings, {
      logger: false,
      daemons: false,
      observeModelCall: (call) => calls.push(call),
    });
    try {
      const agentName = options.agent ?? app.agents.list()[0]?.name;
      if (agentName === undefined || app.agents.find(agentName) === undefined) {
        throw new CliUsageError(
          agentName === undefined
            ? 'No agent to evaluate: create one (cairn init) or pass --agent NAME.'
            : `There is no agent "${agentName}" in ${settings.agentsDir}.`,
        );
      }
      const progress = progressBar(process.stderr);
      const report = await runCompactionEval({
        app,
        agentName,
        facts,
        compactions,
        seed,
        calls,
        scoreAnswers: options.modelUrl !== undefined,
        ...(progress ? { onProgress: progress } : {}),
      });
      console.log(options.json ? JSON.stringify(report, null, 2) : formatEvalReport(report));
      return report;
    } finally {
      await app.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
