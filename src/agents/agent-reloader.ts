/**
 * Agents live: reloads agents/*\/agent.json into the registry
 * without a restart, on demand (`POST /agents/reload`) or when the folder
 * changes (a debounced file watch). Each reload runs the start-up checks. A
 * turn that already started keeps the agent version it got; the next lookup
 * gets the new one. Daemon schedules follow each reload (`afterReload`).
 * Tool modules are ES modules, cached by Node once imported: a changed
 * module file takes a restart.
 */
import { watch, type FSWatcher } from 'node:fs';
import { describeError } from '../errors.js';
import type { AgentProblem } from './agent-config.js';
import type { AgentRegistry } from './agent-registry.js';
import type { ResolveTools } from './check-agent-tools.js';
import { checkAgentTools } from './check-agent-tools.js';
import { formatProblem, loadAgents, orderProblems } from './load-agents.js';

/** Editors write a file in several steps; wait for them to settle. */
export const AGENT_WATCH_DEBOUNCE_MS = 300;

export interface ReloadResult {
  agents: string[];
  /** One line per problem (file, pointer, message, rule), as `cairn agents validate` prints. */
  problems: string[];
}

export interface AgentReloaderDeps {
  agentsDir: string;
  registry: AgentRegistry;
  resolveTools: ResolveTools;
  log: (details: Record<string, unknown>, message: string) => void;
  /** Problems: a reload that found broken files, or failed, or a folder not watched (default: `log`). */
  warn?: (details: Record<string, unknown>, message: string) => void;
  /** Runs after each swap, before the reload resolves: the daemon scheduler follows the new set. */
  afterReload?: () => Promise<void>;
  /** Starts the folder's watch (default: node:fs `watch`, recursive). */
  watchFolder?: (dir: string, onChange: (file: string | null) => void) => FSWatcher;
}

export class AgentReloader {
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Reloads run one at a time; a change during one schedules the next. */
  private running: Promise<ReloadResult> | undefined;

  constructor(private readonly deps: AgentReloaderDeps) {}

  private readonly problem = (details: Record<string, unknown>, message: string): void =>
    (this.deps.warn ?? this.deps.log)(details, message);

  /** Loads and checks every agent, then swaps the set in. */
  async reload(): Promise<ReloadResult> {
    const previous = this.running ?? Promise.resolve(undefined);
    const next = previous.then(
      () => this.load(),
      () => this.load(),
    );
    this.running = next;
    return next;
  }

  private async load(): Promise<ReloadResult> {
    const { agents, problems, toolLists } = loadAgents(this.deps.agentsDir);
    const toolProblems: AgentProblem[] = await checkAgentTools(toolLists, this.deps.resolveTools);
    this.deps.registry.replace(agents, problems);
    await this.deps.afterReload?.();
    const lines = orderProblems([...problems, ...toolProblems]).map(formatProblem);
    (lines.length > 0 ? this.problem : this.deps.log)(
      { agents: agents.map((a) => a.name), problems: lines },
      `agents reloaded (${agents.length} loaded, ${lines.length} problem(s))`,
    );
    return { agents: agents.map((a) => a.name), problems: lines };
  }

  /** Starts watching the agents folder (no-op if it does not exist yet). */
  watch(): void {
    if (this.watcher) return;
    this.closed = false;
    const onChange = (file: string | null): void => {
      if (file === null || file.endsWith('.json') || !file.includes('.')) this.schedule();
    };
    try {
      this.watcher = (this.deps.watchFolder ?? watchRecursive)(this.deps.agentsDir, onChange);
      this.watcher.on('error', () => this.watchAgain());
    } catch (err) {
      this.problem(
        { agentsDir: this.deps.agentsDir, reason: describeError(err) },
        'agents folder not watched; use POST /agents/reload after changes',
      );
    }
  }

  /**
   * Node's recursive watch reports an error when a folder goes while it reads
   * it (an agent's folder removed): the watch stops. It is started again, and
   * the folder reloaded, since a change may have gone unseen meanwhile.
   */
  private watchAgain(): void {
    this.watcher?.close();
    this.watcher = undefined;
    if (this.closed) return;
    const timer = setTimeout(() => {
      if (this.closed) return;
      this.watch();
      this.schedule();
    }, AGENT_WATCH_DEBOUNCE_MS);
    timer.unref();
  }

  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.reload().catch((err: unknown) =>
        this.problem({ reason: describeError(err) }, 'agent reload failed'),
      );
    }, AGENT_WATCH_DEBOUNCE_MS);
    this.timer.unref();
  }

  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.watcher?.close();
    this.watcher = undefined;
  }
}

function watchRecursive(dir: string, onChange: (file: string | null) => void): FSWatcher {
  return watch(dir, { recursive: true }, (_event, file) => onChange(file));
}
