/**
 * Loads agents/<name>/agent.json: validates each file against schemas/agent.json,
 * checks its name and every path it names, resolves `systemFile`, applies the
 * defaults and returns deep-frozen configs plus every problem found, each at its
 * line and column. A bad agent is reported and skipped; it never stops the good
 * ones from loading. Every check runs on as much of a file as could be read, so
 * one run reports all of a file's problems, its tool list included (the tool
 * check reads `toolLists`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { Ajv, type ErrorObject, type SchemaObject, type ValidateFunction } from 'ajv';
import { CairnError, describeError } from '../errors.js';
import { parseJsonSource, type JsonSource, type SourcePosition } from '../config/json-source.js';
import { didYouMean } from '../config/nearest-name.js';
import {
  DEFAULT_COMPACT_COUNT,
  DEFAULT_MAX_ITERATIONS,
  DEFAULT_AUTO_THRESHOLD,
  prepareAtOf,
  DEFAULT_MAX_SUMMARY_CHARS,
  DEFAULT_MEMORY_MAX_CHARS,
  DEFAULT_PRUNE_TOOL_RESULTS,
  DEFAULT_RECALL,
  type AgentConfig,
  type AgentLimits,
  type AgentProblem,
  type AgentToolList,
  type ToolEntryPlace,
} from './agent-config.js';

/** src/agents/ under vitest and dist/agents/ when built: both two levels below the repo root. */
const SCHEMA_URL = new URL('../../schemas/agent.json', import.meta.url);
const AGENT_FILE = 'agent.json';

/** agent.json as the schema guarantees it. */
interface AgentFile {
  name: string;
  description?: string;
  model?: string;
  system?: string;
  systemFile?: string;
  tools?: (string | { tool: string; approval?: 'required'; approvalTimeout?: string })[];
  maxIterations?: number;
  limits?: AgentLimits;
  temperature?: number;
  autoTitle?: boolean;
  memory?: { enabled?: boolean; maxChars?: number; write?: boolean };
  defaultCompaction?: {
    compactCount?: number;
    /** The older spelling of `compactCount`, still accepted. */
    compactionCount?: number;
    autoThreshold?: number;
    prepareAt?: number;
    maxSummaryChars?: number;
    summaryFormat?: 'sections' | 'prose';
    pruneToolResults?: false | { keepLast?: number; minTokens?: number };
    recall?: {
      enabled?: boolean;
      maxMessages?: number;
      maxTokens?: number;
      minScore?: number;
      minRelativeScore?: number;
      mode?: 'hybrid' | 'lexical';
    };
  };
  daemon?: { every?: string; cron?: string; prompt: string };
}

let compiledValidator: ValidateFunction<AgentFile> | undefined;

/** Compiled once per process: the schema ships with the code and never changes at run time. */
function agentValidator(): ValidateFunction<AgentFile> {
  // verbose: oneOf errors carry their schema, from which the message names the alternatives.
  // strictRequired off: the oneOf branches require properties declared by the parent.
  compiledValidator ??= new Ajv({
    allErrors: true,
    verbose: true,
    strict: true,
    strictRequired: false,
  }).compile<AgentFile>(JSON.parse(fs.readFileSync(SCHEMA_URL, 'utf8')) as SchemaObject);
  return compiledValidator;
}

export interface LoadedAgentFiles {
  agents: AgentConfig[];
  /** The problems of the files that were rejected, by file, each file's by position. */
  problems: AgentProblem[];
  /** The tool list of every file that could be read, loaded or not: what `checkAgentTools` checks. */
  toolLists: AgentToolList[];
}

/**
 * Loads every `<agentsDir>/<name>/agent.json`. Folders without an agent.json are
 * ignored; a missing `agentsDir` yields no agents and no problems.
 */
export function loadAgents(agentsDir: string): LoadedAgentFiles {
  const agents: AgentConfig[] = [];
  const problems: AgentProblem[] = [];
  const toolLists: AgentToolList[] = [];
  for (const folder of listAgentFolders(agentsDir)) {
    const result = loadAgent(path.join(agentsDir, folder), folder);
    if (result.agent) agents.push(result.agent);
    problems.push(...orderProblems(result.problems));
    if (result.toolList) toolLists.push(result.toolList);
  }
  agents.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { agents, problems, toolLists };
}

/** One line per problem: `agents/x/agent.json:4:3: /maxIterations must be <= 100 (maximum)`. */
export function formatProblem(p: AgentProblem): string {
  const at = p.line !== undefined ? `:${p.line}:${p.column ?? 1}` : '';
  return `${p.file}${at}: ${p.pointer ? `${p.pointer} ` : ''}${p.message} (${p.rule})`;
}

/**
 * Problems by file, then in the order they appear in it (a problem of the
 * whole file first): a report reads top to bottom like the files.
 */
export function orderProblems(problems: readonly AgentProblem[]): AgentProblem[] {
  return [...problems].sort(
    (a, b) =>
      (a.file < b.file ? -1 : a.file > b.file ? 1 : 0) ||
      (a.line ?? 0) - (b.line ?? 0) ||
      (a.column ?? 0) - (b.column ?? 0),
  );
}

function listAgentFolders(agentsDir: string): string[] {
  let names: string[];
  try {
    names = fs.readdirSync(agentsDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new CairnError(
      'INTERNAL',
      `Cannot read the agents folder ${agentsDir}: ${describeError(err)}`,
      {
        cause: err,
      },
    );
  }
  return names
    .filter(
      (name) =>
        isDirectory(path.join(agentsDir, name)) &&
        fs.existsSync(path.join(agentsDir, name, AGENT_FILE)),
    )
    .sort();
}

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

interface LoadResult {
  agent?: AgentConfig;
  problems: AgentProblem[];
  toolList?: AgentToolList;
}

type ToolEntry = NonNullable<AgentFile['tools']>[number];

function loadAgent(folderPath: string, folderName: string): LoadResult {
  const file = path.join(folderPath, AGENT_FILE);
  const parsed = readJson(file);
  if ('error' in parsed) {
    return {
      problems: [
        { file, pointer: '', rule: 'json-parse', message: parsed.error, ...parsed.position },
      ],
    };
  }
  const { value: data, source } = parsed;
  const problem = (pointer: string, rule: string, message: string): AgentProblem => ({
    file,
    pointer,
    rule,
    message,
    ...source.positionOf(pointer),
  });

  const validate = agentValidator();
  const valid = validate(data);
  const errors = valid ? [] : (validate.errors ?? []);
  const problems = schemaProblems(errors, file, source);
  // Past this point each check reads only the parts the schema found sound,
  // so a typo in one field never hides a problem in another.
  const flagged = (pointer: string): boolean =>
    errors.some((e) => e.instancePath === pointer || e.instancePath.startsWith(`${pointer}/`));
  const name = isRecord(data) ? data['name'] : undefined;
  if (typeof name === 'string' && name !== folderName) {
    problems.push(
      problem(
        '/name',
        'name-mismatch',
        `must equal the folder name "${folderName}", found "${name}"`,
      ),
    );
  }
  if (!isRecord(data)) return { problems };

  const compaction = data['defaultCompaction'];
  if (
    isRecord(compaction) &&
    compaction['compactCount'] !== undefined &&
    compaction['compactionCount'] !== undefined
  ) {
    problems.push(
      problem(
        '/defaultCompaction/compactionCount',
        'alias',
        'is the older spelling of compactCount, which is also given: keep compactCount only',
      ),
    );
  }
  if (isRecord(compaction) && !flagged('/defaultCompaction')) {
    const prepareAt = compaction['prepareAt'];
    const threshold = compaction['autoThreshold'] ?? DEFAULT_AUTO_THRESHOLD;
    // The summary is prepared before the threshold, or the turn at it waits anyway.
    if (
      typeof prepareAt === 'number' &&
      typeof threshold === 'number' &&
      prepareAt > 0 &&
      threshold > 0 &&
      prepareAt >= threshold
    ) {
      problems.push(
        problem(
          '/defaultCompaction/prepareAt',
          'prepare-at',
          `must be below autoThreshold (${threshold}): the summary is prepared before the threshold is reached; 0 turns preparing off`,
        ),
      );
    }
  }
  const dir = fs.realpathSync(folderPath);
  const seen = new Set<string>();
  // With `uniqueItems` already reported, a repeated entry is not reported again.
  const listFlagged = errors.some((e) => e.instancePath === '/tools');
  const usable: { entry: ToolEntry; place: ToolEntryPlace }[] = [];
  readableToolEntries(data['tools'], flagged).forEach(({ entry, index }) => {
    const tool = toolSpecOf(entry);
    const pointer = `/tools/${index}`;
    let ok = true;
    if (tool.startsWith('./') && resolveInside(dir, tool) === undefined) {
      problems.push(problem(pointer, 'path-escape', `"${tool}" resolves outside the agent folder`));
      ok = false;
    }
    if (seen.has(tool)) {
      if (!listFlagged)
        problems.push(problem(pointer, 'duplicate-tool', `"${tool}" is listed twice`));
      ok = false;
    }
    seen.add(tool);
    if (ok) usable.push({ entry, place: { pointer, ...source.positionOf(pointer) } });
  });

  const systemFile = data['systemFile'];
  let system = typeof data['system'] === 'string' ? data['system'] : undefined;
  if (typeof systemFile === 'string' && !flagged('/systemFile')) {
    const systemPath = resolveInside(dir, systemFile);
    if (systemPath === undefined) {
      problems.push(
        problem('/systemFile', 'path-escape', `"${systemFile}" resolves outside the agent folder`),
      );
    } else {
      try {
        system = fs.readFileSync(systemPath, 'utf8');
        if (system.trim() === '')
          problems.push(problem('/systemFile', 'system-file', `"${systemFile}" is empty`));
      } catch (err) {
        problems.push(
          problem(
            '/systemFile',
            'system-file',
            `cannot read "${systemFile}": ${describeError(err)}`,
          ),
        );
      }
    }
  }

  const listPlace = { pointer: '/tools', ...source.positionOf('/tools') };
  if (problems.length > 0 || !valid || system === undefined) {
    // A stand-in with the sound entries only: the tool check must never import
    // a module outside the folder, nor read an entry the schema refused.
    const standIn = toAgentConfig({ name: folderName, tools: usable.map((u) => u.entry) }, '', dir);
    const toolList = { file, agent: standIn, entries: usable.map((u) => u.place), list: listPlace };
    return { problems, toolList };
  }
  const agent = toAgentConfig(data, system, dir);
  return {
    agent,
    problems: [],
    toolList: { file, agent, entries: usable.map((u) => u.place), list: listPlace },
  };
}

/** The entries of `tools` the schema found sound, with their index in the file. */
function readableToolEntries(
  tools: unknown,
  flagged: (pointer: string) => boolean,
): { entry: ToolEntry; index: number }[] {
  if (!Array.isArray(tools)) return [];
  const readable: { entry: ToolEntry; index: number }[] = [];
  tools.forEach((entry: unknown, index) => {
    if (flagged(`/tools/${index}`)) return;
    if (typeof entry === 'string' || (isRecord(entry) && typeof entry['tool'] === 'string'))
      readable.push({ entry: entry as ToolEntry, index });
  });
  return readable;
}

function readJson(
  file: string,
): { value: unknown; source: JsonSource } | { error: string; position?: SourcePosition } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    return { error: describeError(err) };
  }
  const parsed = parseJsonSource(text);
  return 'error' in parsed
    ? { error: `not valid JSON: ${parsed.error}`, position: parsed.position }
    : parsed;
}

/** The spec string of a `tools` entry (a string, or an object with options). */
function toolSpecOf(entry: ToolEntry): string {
  return typeof entry === 'string' ? entry : entry.tool;
}

function toAgentConfig(data: AgentFile, system: string, dir: string): AgentConfig {
  const compaction = data.defaultCompaction ?? {};
  return deepFreeze({
    name: data.name,
    description: data.description ?? '',
    ...(data.model !== undefined && { model: data.model }),
    system,
    tools: (data.tools ?? []).map(toolSpecOf),
    toolsNeedingApproval: (data.tools ?? [])
      .filter((entry) => typeof entry !== 'string' && entry.approval === 'required')
      .map(toolSpecOf),
    ...approvalTimeoutsOf(data.tools ?? []),
    maxIterations: data.maxIterations ?? DEFAULT_MAX_ITERATIONS,
    ...(data.limits ? { limits: Object.freeze({ ...data.limits }) } : {}),
    ...(data.temperature !== undefined && { temperature: data.temperature }),
    autoTitle: data.autoTitle ?? false,
    memory: {
      enabled: data.memory?.enabled ?? false,
      maxChars: data.memory?.maxChars ?? DEFAULT_MEMORY_MAX_CHARS,
      write: data.memory?.write ?? true,
    },
    defaultCompaction: {
      compactCount: compaction.compactCount ?? compaction.compactionCount ?? DEFAULT_COMPACT_COUNT,
      autoThreshold: compaction.autoThreshold ?? DEFAULT_AUTO_THRESHOLD,
      prepareAt: prepareAtOf(
        compaction.prepareAt,
        compaction.autoThreshold ?? DEFAULT_AUTO_THRESHOLD,
      ),
      maxSummaryChars: compaction.maxSummaryChars ?? DEFAULT_MAX_SUMMARY_CHARS,
      summaryFormat: compaction.summaryFormat ?? 'sections',
      pruneToolResults:
        compaction.pruneToolResults === false
          ? false
          : { ...DEFAULT_PRUNE_TOOL_RESULTS, ...compaction.pruneToolResults },
      recall: { ...DEFAULT_RECALL, ...compaction.recall },
    },
    ...(data.daemon !== undefined && { daemon: { ...data.daemon } }),
    dir,
  });
}

/**
 * The real path of `relPath` inside the (real) folder `dir`, or undefined when it
 * is absolute, climbs out with `..`, or reaches outside through a symlink.
 * Paths that do not exist yet are checked through their closest existing parent.
 */
function resolveInside(dir: string, relPath: string): string | undefined {
  if (path.isAbsolute(relPath)) return undefined;
  const target = realPathOfExisting(path.resolve(dir, relPath));
  if (target === undefined) return undefined;
  const rel = path.relative(dir, target);
  const outside = rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel);
  return outside ? undefined : target;
}

/** realpath of the longest existing prefix; undefined for a link that cannot be resolved (dangling, loop). */
function realPathOfExisting(p: string): string | undefined {
  try {
    return fs.realpathSync(p);
  } catch {
    if (existsAsLink(p)) return undefined;
    const parent = path.dirname(p);
    if (parent === p) return p;
    const realParent = realPathOfExisting(parent);
    return realParent === undefined ? undefined : path.join(realParent, path.basename(p));
  }
}

function existsAsLink(p: string): boolean {
  try {
    fs.lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * ajv errors as problems, with the unknown property named (and the property it
 * may stand for) and follow-on noise left out, each at its place in `source`.
 */
function schemaProblems(
  errors: readonly ErrorObject[],
  file: string,
  source: JsonSource,
): AgentProblem[] {
  const oneOfs = errors.filter((e) => e.keyword === 'oneOf');
  const wrongTypes = new Set(errors.filter((e) => e.keyword === 'type').map((e) => e.instancePath));
  // With allErrors, a failed oneOf also reports each branch's failure ("must have
  // required property 'system'" and "... 'systemFile'"); its own message says it all.
  // And once a value has the wrong type, the other rules about it are beside the point.
  const isNoise = (e: ErrorObject): boolean =>
    // An `if` failure only says which branch failed; that branch's own error says why.
    e.keyword === 'if' ||
    (e.keyword !== 'type' && wrongTypes.has(e.instancePath)) ||
    oneOfs.some(
      (o) => e.schemaPath.startsWith(`${o.schemaPath}/`) && e.instancePath === o.instancePath,
    );
  return errors
    .filter((e) => !isNoise(e))
    .map((e) => ({
      file,
      pointer: e.instancePath,
      rule: e.keyword,
      message: schemaMessage(e),
      // An unknown property is shown at its name, not at the object that holds it.
      ...source.positionOf(e.instancePath, unknownProperty(e)),
    }));
}

function schemaMessage(e: ErrorObject): string {
  const unknown = unknownProperty(e);
  if (unknown !== undefined) {
    return `must NOT have additional property "${unknown}"${didYouMean(unknown, knownProperties(e.parentSchema))}`;
  }
  if (e.keyword === 'oneOf' && e.instancePath === '/defaultCompaction/autoThreshold') {
    return 'must be 0 (automatic compaction off) or a percent from 1 to 100';
  }
  if (e.keyword === 'const' && e.instancePath === '/defaultCompaction/pruneToolResults') {
    return 'must be false (clearing off) or an object {keepLast, minTokens}';
  }
  if (e.keyword === 'oneOf' && e.instancePath === '/defaultCompaction/prepareAt') {
    return 'must be 0 (no summary prepared in the background) or a percent from 1 to 99';
  }
  if (e.keyword === 'oneOf') {
    const alternatives = requiredAlternatives(e.schema);
    if (alternatives)
      return `must have exactly one of ${alternatives.map((n) => `"${n}"`).join(', ')}`;
  }
  if (e.keyword === 'maxItems' && e.instancePath === '/tools') {
    // Each entry is at least one tool, so the whole agent could never be offered.
    return `lists ${(e.data as unknown[]).length} tools, more than the ${String(e.params['limit'])} a model request may carry (the provider would refuse every turn); list fewer`;
  }
  return e.message ?? `fails "${e.keyword}"`;
}

/** The property an `additionalProperties` error is about; undefined for other errors. */
function unknownProperty(e: ErrorObject): string | undefined {
  return e.keyword === 'additionalProperties' ? String(e.params['additionalProperty']) : undefined;
}

/** The properties an object schema declares (ajv's `verbose` gives each error its parent schema). */
function knownProperties(schema: unknown): string[] {
  const properties = isRecord(schema) ? schema['properties'] : undefined;
  return isRecord(properties) ? Object.keys(properties).filter((k) => k !== '$schema') : [];
}

/** `[{required:['a']}, {required:['b']}]` → ['a', 'b']; anything else → undefined. */
function requiredAlternatives(branches: unknown): string[] | undefined {
  if (!Array.isArray(branches)) return undefined;
  const names = branches.map((b: unknown) => {
    const required = isRecord(b) ? b['required'] : undefined;
    return Array.isArray(required) && required.length === 1 && typeof required[0] === 'string'
      ? required[0]
      : undefined;
  });
  return names.every((n): n is string => n !== undefined) ? names : undefined;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value as Record<string, unknown>)) deepFreeze(child);
  }
  return value;
}

/** The `approvalTimeout` of each approval-required entry that has one, by spec. */
function approvalTimeoutsOf(entries: NonNullable<AgentFile['tools']>): {
  approvalTimeouts?: Readonly<Record<string, string>>;
} {
  const timeouts: Record<string, string> = {};
  for (const entry of entries)
    if (typeof entry !== 'string' && entry.approval === 'required' && entry.approvalTimeout)
      timeouts[entry.tool] = entry.approvalTimeout;
  return Object.keys(timeouts).length > 0 ? { approvalTimeouts: Object.freeze(timeouts) } : {};
}
