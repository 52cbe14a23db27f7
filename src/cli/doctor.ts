/**
 * `cairn doctor`: checks what a first start most often trips on, one ✓ or ✗
 * line each — the settings load, the database opens (without migrating or
 * creating it), every endpoint of every model role answers a tiny real request
 * within a timeout, every agent validates, and a server recorded in this home
 * answers. Everything is checked even after a failure; the exit code is 1
 * when anything failed.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { createEndpoint } from '../app.js';
import { loadSettings, type ModelRoleSettings, type Settings } from '../config/settings.js';
import { CairnError, describeError } from '../errors.js';
import { POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS } from '../store/migrations/index.js';
import { openPool } from '../store/postgres/open-pool.js';
import { openDatabase } from '../store/sqlite/open-database.js';
import { CliUsageError } from './client.js';
import { checkAgents, describePostgresUrl } from './commands.js';
import { findServerAddress } from './server-address.js';

/** How long one model endpoint (or the recorded server) may take to answer, unless --timeout says. */
export const DOCTOR_TIMEOUT_MS = 15_000;
/** The test request: short, so it costs a handful of tokens. */
const PROBE_MESSAGE = 'Reply with the single word: ok';

interface Check {
  ok: boolean;
  /** `settings`, `database`, `model main`, `agent assistant`, … */
  name: string;
  detail: string;
  /** False for a line that repeats another check's result (the same endpoint): not counted twice. */
  counted?: boolean;
}

/** `--timeout`'s value in ms, or a one-line error. */
export function parseTimeoutOption(value: string | undefined): number {
  if (value === undefined) return DOCTOR_TIMEOUT_MS;
  const ms = /^\d+$/.test(value.trim()) ? Number(value) : NaN;
  if (!Number.isSafeInteger(ms) || ms < 1)
    throw new CliUsageError(
      `--timeout must be a whole number of milliseconds, 1 or more, got "${value}".`,
    );
  return ms;
}

/** Runs every check, then prints one line for each (on stdout, in order); returns the exit code. */
export async function doctor(options: { timeout?: string }): Promise<number> {
  const timeoutMs = parseTimeoutOption(options.timeout);
  let settings: Settings;
  try {
    settings = loadSettings();
  } catch (err) {
    printChecks([{ ok: false, name: 'settings', detail: describeError(err) }]);
    return 1;
  }
  // The slow checks (requests) run together; their lines keep a fixed order.
  const models = checkModels(settings, timeoutMs);
  const server = checkServer(settings, timeoutMs);
  const checks: Check[] = [
    { ok: true, name: 'settings', detail: `${settings.home} (cairn.json and environment)` },
    await checkDatabase(settings),
    ...(await models),
    ...(await agentChecks(settings)),
    ...[await server].filter((check) => check !== undefined),
  ];
  printChecks(checks);
  const failed = checks.filter((c) => !c.ok && c.counted !== false).length;
  console.log(
    failed === 0 ? 'all checks passed' : `${failed} ${failed === 1 ? 'check' : 'checks'} failed`,
  );
  return failed === 0 ? 0 : 1;
}

function printChecks(checks: readonly Check[]): void {
  const width = Math.max(...checks.map((c) => c.name.length));
  for (const check of checks)
    console.log(`${check.ok ? '✓' : '✗'} ${check.name.padEnd(width)}  ${oneLine(check.detail)}`);
}

const oneLine = (text: string): string => text.replace(/\s*\n\s*/g, '; ');

/**
 * SQLite: the file opens as a database of a version this Cairn knows (no
 * migration is applied, nothing is created); Postgres: a connection answers.
 */
async function checkDatabase(settings: Settings): Promise<Check> {
  const { url, path } = settings.database;
  if (url !== null) return checkPostgres(url);
  if (path === ':memory:')
    return { ok: true, name: 'database', detail: 'in memory (CAIRN_DB=:memory:), made at start' };
  if (!existsSync(path)) {
    const folder = nearestExisting(dirname(path));
    try {
      accessSync(folder, constants.W_OK);
    } catch {
      return {
        ok: false,
        name: 'database',
        detail: `${path} does not exist, and ${folder} is not writable: cairn serve cannot create it. Point CAIRN_DB (or database.path in cairn.json) elsewhere.`,
      };
    }
    return {
      ok: true,
      name: 'database',
      detail: `${path} (not created yet: cairn serve creates it)`,
    };
  }
  try {
    const db = openDatabase(path, { migrate: false });
    try {
      const hasTable = db
        .prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'")
        .get();
      const applied = hasTable
        ? (db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[])
        : [];
      return migrationCheck(`${path} (SQLite)`, applied, SQLITE_MIGRATIONS);
    } finally {
      db.close();
    }
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    return {
      ok: false,
      name: 'database',
      detail: `cannot open ${path}${typeof code === 'string' ? ` (${code}: ${describeError(err)})` : `: ${describeError(err)}`}. Check that it is a SQLite file this user may read and write, or point CAIRN_DB (or database.path in cairn.json) at another file.`,
    };
  }
}

async function checkPostgres(url: string): Promise<Check> {
  const where = describePostgresUrl(url);
  const pool = openPool(url, { poolSize: 1 });
  try {
    const { rows } = await pool
      .query<{ version: number }>('SELECT version FROM schema_migrations')
      .catch((err: unknown) => {
        // No table yet: a new database, which cairn serve migrates.
        if ((err as { code?: unknown }).code === '42P01') return { rows: [] };
        throw err;
      });
    return migrationCheck(
      where,
      rows.map((r) => Number(r.version)),
      POSTGRES_MIGRATIONS,
    );
  } catch (err) {
    return {
      ok: false,
      name: 'database',
      detail: `cannot reach ${where}: ${describeError(err)}. Check DATABASE_URL (or database.url in cairn.json) and that the server is running.`,
    };
  } finally {
    await pool.end().catch(() => undefined);
  }
}

function migrationCheck(
  where: string,
  applied: readonly number[],
  known: readonly { version: number }[],
): Check {
  const versions = new Set(known.map((m) => m.version));
  const unknown = applied.filter((v) => !versions.has(v));
  if (unknown.length > 0)
    return {
      ok: false,
      name: 'database',
      detail: `${where} was migrated by a newer Cairn (migrations ${unknown.join(', ')} are unknown to this one): upgrade Cairn to open it.`,
    };
  const pending = known.length - applied.length;
  return {
    ok: true,
    name: 'database',
    detail:
      pending === 0
        ? `${where}, schema up to date`
        : `${where}, ${pending} migration${pending === 1 ? '' : 's'} to apply (cairn serve or cairn migrate applies them)`,
  };
}

function nearestExisting(folder: string): string {
  let current = folder;
  while (!existsSync(current) && dirname(current) !== current) current = dirname(current);
  return current;
}

/** One endpoint of a role, as the checks name it. */
interface Endpoint {
  name: string;
  settings: ModelRoleSettings;
  /** The roles that fall back to this one whole, as words for its line. */
  usedBy: string;
}

/**
 * Every endpoint of every role (a role's own, then its fallbacks). A role
 * that falls back to another whole, or an endpoint already asked, is not
 * asked twice: its line says which check it shares.
 */
async function checkModels(settings: Settings, timeoutMs: number): Promise<Check[]> {
  const endpoints: Endpoint[] = [];
  const { main, compact, title } = settings.models;
  // A role not configured is its fallback role, the same object: one line for both.
  const roles = [
    {
      role: 'main',
      own: main,
      alsoFor: [compact === main && 'compact', title === main && 'title'],
    },
    {
      role: 'compact',
      own: compact === main ? undefined : compact,
      alsoFor: [title === compact && 'title'],
    },
    { role: 'title', own: title === compact ? undefined : title, alsoFor: [] },
  ];
  for (const { role, own, alsoFor } of roles) {
    if (own === undefined) continue;
    const shared = alsoFor.filter(Boolean);
    const usedBy = shared.length > 0 ? ` (for ${shared.join(' and ')} too)` : '';
    for (const [i, endpoint] of [own, ...(own.fallbacks ?? [])].entries())
      endpoints.push({
        name: i === 0 ? `model ${role}` : `model ${role} fallback ${i}`,
        settings: endpoint,
        usedBy: i === 0 ? usedBy : '',
      });
  }
  const asked = new Map<string, { name: string; answer: Promise<Check> }>();
  const checks = endpoints.map(({ name, settings: endpoint, usedBy }) => {
    const key = endpointKey(endpoint);
    const earlier = asked.get(key);
    if (earlier)
      return earlier.answer.then((check) => ({
        ...check,
        name,
        detail: `same endpoint as ${earlier.name}: ${describeEndpoint(endpoint)}`,
        counted: false,
      }));
    const answer = probe(name, endpoint, timeoutMs, `${describeEndpoint(endpoint)}${usedBy}`);
    asked.set(key, { name, answer });
    return answer;
  });
  return Promise.all(checks);
}

const endpointKey = (e: ModelRoleSettings): string =>
  JSON.stringify([e.provider, e.baseURL, e.model, e.apiKeyEnv, e.apiKey !== null]);

function describeEndpoint(e: ModelRoleSettings): string {
  return e.provider === 'offline'
    ? 'offline (the built-in deterministic model, no network)'
    : `${e.model} (${e.provider}) at ${e.baseURL ?? ''}`;
}

/** One tiny request to one endpoint, without retries, within `timeoutMs`. */
async function probe(
  name: string,
  endpoint: ModelRoleSettings,
  timeoutMs: number,
  label: string,
): Promise<Check> {
  const client = createEndpoint(
    {
      ...endpoint,
      maxRetries: 0,
      timeoutMs: Math.min(endpoint.timeoutMs, timeoutMs),
      fallbacks: [],
    },
    { warn: () => undefined },
  );
  const started = performance.now();
  try {
    await client.complete(
      { messages: [{ role: 'user', content: PROBE_MESSAGE }], purpose: 'chat' },
      { signal: AbortSignal.timeout(timeoutMs) },
    );
    const ms = Math.round(performance.now() - started);
    return { ok: true, name, detail: `${label}: answered in ${ms} ms` };
  } catch (err) {
    const timedOut =
      (err instanceof CairnError && err.code === 'LLM_TIMEOUT') ||
      (err as Error).name === 'TimeoutError';
    const why = timedOut
      ? `did not answer within ${Math.min(endpoint.timeoutMs, timeoutMs)} ms (cairn doctor --timeout <ms> waits longer)`
      : describeError(err);
    return { ok: false, name, detail: `${label}: ${why}` };
  }
}

async function agentChecks(settings: Settings): Promise<Check[]> {
  let found: Awaited<ReturnType<typeof checkAgents>>;
  try {
    found = await checkAgents(settings);
  } catch (err) {
    return [{ ok: false, name: 'agents', detail: describeError(err) }];
  }
  const checks: Check[] = found.valid.map((name) => ({
    ok: true,
    name: `agent ${name}`,
    detail: 'valid, its tools load',
  }));
  for (const error of found.errors) {
    const agent =
      /[/\\]agents[/\\]([^/\\]+)[/\\]agent\.json/.exec(error)?.[1] ??
      /^agent "([^"]+)"/.exec(error)?.[1];
    checks.push({ ok: false, name: agent ? `agent ${agent}` : 'agents', detail: error });
  }
  if (found.found === 0 && found.errors.length === 0)
    checks.push({
      ok: false,
      name: 'agents',
      detail: `none in ${settings.agentsDir}: add agents/<name>/agent.json (cairn init writes a demo agent)`,
    });
  return checks;
}

/** The server recorded in this home, if one is running: it must answer /health. */
async function checkServer(settings: Settings, timeoutMs: number): Promise<Check | undefined> {
  const recorded = findServerAddress(settings.home);
  if (recorded === undefined) return undefined;
  try {
    const res = await fetch(`${recorded.url}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return {
      ok: true,
      name: 'server',
      detail: `${recorded.url} (cairn serve, pid ${recorded.pid}) answers`,
    };
  } catch (err) {
    return {
      ok: false,
      name: 'server',
      detail: `${recorded.url} (cairn serve, pid ${recorded.pid}) does not answer: ${describeError(err)}`,
    };
  }
}
