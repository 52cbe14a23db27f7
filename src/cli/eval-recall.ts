/**
 * `cairn eval recall`: runs the recall eval (src/eval/recall-eval.ts) in this
 * process, against an agent of the current folder, with the offline model on
 * a throwaway SQLite database (the real one is never touched). Without
 * `--data`, it runs the conversation file shipped with Cairn. With an embed
 * role (cairn.json's, or the bundled model by `--embed local`) it measures
 * lexical and hybrid recall side by side; `--embed none` measures lexical
 * recall alone.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startApp } from '../app.js';
import {
  LOCAL_EMBED_MODEL,
  loadSettings,
  type EmbedRoleSettings,
  type Settings,
} from '../config/settings.js';
import {
  formatRecallReport,
  parseRecallData,
  RecallDataError,
  runRecallEval,
  type RecallData,
  type RecallEvalReport,
} from '../eval/recall-eval.js';
import { CliUsageError } from './client.js';
import { evalSettings, progressBar } from './eval-compaction.js';

export interface EvalRecallOptions {
  agent?: string;
  data?: string;
  compacted?: string;
  embed?: string;
  json?: boolean;
}

const LOCAL_EVAL_TIMEOUT_MS = 60_000;

/**
 * The bundled model as `models.embed: {"provider": "local"}` configures it,
 * but for the wait: the eval's first batch also loads the model.
 */
const LOCAL_ROLE: EmbedRoleSettings = Object.freeze({
  provider: 'local',
  baseURL: null,
  model: LOCAL_EMBED_MODEL,
  apiKeyEnv: '',
  apiKey: null,
  dimensions: 512,
  timeoutMs: LOCAL_EVAL_TIMEOUT_MS,
  pricing: null,
});

/** The embed role the eval runs hybrid recall with: cairn.json's unless `--embed` says otherwise. */
function embedRole(settings: Settings, value: string | undefined): EmbedRoleSettings | null {
  if (value === undefined) return settings.models.embed;
  if (value === 'local') return LOCAL_ROLE;
  if (value === 'none') return null;
  throw new CliUsageError(
    `--embed must be "local" (the bundled model) or "none" (lexical recall only), got "${value}"; without it the eval uses the embed role of cairn.json, if any.`,
  );
}

/** The conversation file shipped in the package (`eval/` beside `dist/`). */
export const DEFAULT_RECALL_DATA = resolve(
  dirname(fileURLToPath(import.meta.url)),
  '../../eval/recall-conversations.json',
);
const DEFAULT_COMPACTED = 0.9;

function share(value: string | undefined): number {
  if (value === undefined) return DEFAULT_COMPACTED;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0 || n >= 1) {
    throw new CliUsageError(
      `--compacted must be a share between 0 and 1, like 0.9, got "${value}".`,
    );
  }
  return n;
}

function readData(file: string): RecallData {
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new CliUsageError(`--data ${file}: ${(err as Error).message}`);
  }
  try {
    return parseRecallData(json);
  } catch (err) {
    if (err instanceof RecallDataError) throw new CliUsageError(`--data ${file}: ${err.message}`);
    throw err;
  }
}

export async function evalRecall(options: EvalRecallOptions): Promise<RecallEvalReport> {
  const compacted = share(options.compacted);
  const data = readData(options.data ?? DEFAULT_RECALL_DATA);
  const dir = mkdtempSync(join(tmpdir(), 'cairn-eval-recall-'));
  try {
    const loaded = evalSettings(loadSettings(), dir);
    const settings = {
      ...loaded,
      models: { ...loaded.models, embed: embedRole(loaded, options.embed) },
    };
    const app = await startApp(settings, { logger: false, daemons: false });
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
      const report = await runRecallEval({
        app,
        agentName,
        data,
        compacted,
        ...(progress ? { onProgress: progress } : {}),
      });
      console.log(options.json ? JSON.stringify(report, null, 2) : formatRecallReport(report));
      return report;
    } finally {
      await app.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
