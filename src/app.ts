/**
 * The composition root: builds the whole server from a `Settings` object, in
 * steps that each take what the steps before returned (logger, agents,
 * storage, observers, models, tools, context care, runtime, server);
 * `start` then starts the background work, and a step of either that fails
 * closes what was opened. The only module that names concrete
 * implementations. Never listens — the CLI does, and tests use
 * `app.server.inject` or listen on port 0.
 */
import type { FastifyInstance } from 'fastify';
import { AgentRegistry } from './agents/agent-registry.js';
import { formatProblem, loadAgents, orderProblems } from './agents/load-agents.js';
import type { AgentConfig, AgentProblem, AgentToolList } from './agents/agent-config.js';
import { defaultOutputTokens, type ModelRoleSettings, type Settings } from './config/settings.js';
import { describeError } from './errors.js';
import { createServer } from './http/create-server.js';
import { defaultAllowedHosts } from './http/browser-guard.js';
import { compactionRoutes } from './http/routes/compaction.js';
import { StreamGate } from './http/stream-gate.js';
import { defaultStreamShare, KeyShares } from './http/key-shares.js';
import { AutoCompaction } from './compaction/auto-compaction.js';
import { DefaultCompaction } from './compaction/default-compaction.js';
import { BackgroundCompaction } from './compaction/background-compaction.js';
import { AutomaticRecall } from './recall/automatic-recall.js';
import { RecallLedger } from './recall/recall-ledger.js';
import { RECALL_OPEN } from './recall/recall-block.js';
import type { ModelClient } from './llm/model-client.js';
import { OfflineModel } from './llm/offline-model.js';
import { observeModel, type ModelCallObserver, type ModelRole } from './llm/observed-model.js';
import { OpenAIModel } from './llm/openai-model.js';
import { lazyModel } from './llm/lazy-model.js';
import { checkWindow } from './llm/window-check.js';
import { CircuitBreaker, FallbackChain } from './llm/fallback-chain.js';
import type { ModelLogger } from './llm/retry-policy.js';
import { EventBus } from './runtime/event-bus.js';
import { eventLogger } from './runtime/event-log.js';
import { chatTurnLogger } from './runtime/turn-observer.js';
import { SessionTitler } from './runtime/session-titler.js';
import { ApprovalTimeouts } from './runtime/approval-timeouts.js';
import { SUMMARY_PREFIX } from './runtime/context-builder.js';
import type { ChatMessage } from './llm/messages.js';
import { TurnEngine } from './runtime/turn-engine.js';
import { TurnWriter } from './runtime/turn-writes.js';
import { Sessions } from './runtime/sessions.js';
import { ChatTurns } from './runtime/chat-turns.js';
import { SqliteStore } from './store/sqlite/sqlite-store.js';
import { newInstanceId } from './runtime/instance-id.js';
import type { Store } from './store/store.js';
import { builtinTools } from './tools/builtins/index.js';
import { checkAgentTools } from './agents/check-agent-tools.js';
import { ToolCatalog } from './tools/tool-catalog.js';
import { memoryContext } from './tools/builtins/memory.js';
import { DaemonScheduler } from './runtime/daemon-scheduler.js';
import { Subagents } from './runtime/subagents.js';
import { KeyedQueue } from './runtime/keyed-queue.js';
import type { SessionLock } from './runtime/session-lock.js';
import { TaskRunner } from './runtime/task-runner.js';
import { recoverAfterRestart, recoverOrphanedWork } from './runtime/startup-recovery.js';
import type { AdvisorySessionLock } from './coordination/advisory-session-lock.js';
import { InstanceHeartbeat, STALE_AFTER_MS } from './coordination/instance-heartbeat.js';
import { KeyReservations } from './coordination/key-reservations.js';
import type { Budget } from './runtime/budget.js';
import type { SharedEventFeed } from './coordination/shared-event-feed.js';
import { memoryRoutes } from './http/routes/memory.js';
import { taskRoutes } from './http/routes/tasks.js';
import { mcpRoutes } from './http/routes/mcp.js';
import type { McpBackoff } from './mcp/mcp-connection.js';
import { McpManager } from './mcp/mcp-manager.js';
import { checkMcpToolEntries, usesMcp } from './mcp/check-agent-tools.js';
import { openaiApiRoutes } from './openai-api/routes.js';
import { consoleBuilt, consoleRoutes, DEFAULT_CONSOLE_DIR } from './http/routes/console.js';
import {
  DEFAULT_KEY_IMPORTS,
  ImportAllowance,
  sessionTransferRoutes,
} from './http/routes/session-transfer.js';
import { metricsRoutes, registerTurnMetrics } from './http/routes/metrics.js';
import { agentReloadRoutes, agentRoutes } from './http/routes/agents.js';
import { chatRoutes } from './http/routes/chat.js';
import { eventRoutes } from './http/routes/events.js';
import { healthRoutes } from './http/routes/health.js';
import { sessionRoutes } from './http/routes/sessions.js';
import { callRoutes } from './http/routes/calls.js';
import { AgentReloader } from './agents/agent-reloader.js';
import { a2aRoutes } from './a2a/routes.js';
import { aiSdkRoutes } from './ai-sdk/routes.js';
import { agUiRoutes } from './ag-ui/routes.js';
import { CairnMetrics } from './metrics/metrics.js';
import { CallRecorder } from './records/call-recorder.js';
import { RecordPruner } from './records/record-pruner.js';
import { NO_TRACING, type Tracing } from './telemetry/tracing.js';
import { traceModel } from './telemetry/traced-model.js';
import { ClientKeys } from './http/client-keys.js';
import { KeyLimits } from './http/key-limits.js';
import { Access } from './http/access.js';
import { keyRoutes } from './http/routes/keys.js';
import { LateBinding } from './late-binding.js';
import { OpenAiEmbeddings, type EmbeddingClient } from './llm/embedding-client.js';
import { LocalEmbeddings, resolveLocalModel } from './llm/local-embeddings.js';
import { Embedder } from './recall/embedder.js';
import { EmbeddingBacklog } from './recall/embedding-backlog.js';
import { VectorRecall } from './recall/hybrid-recall.js';
import { createLogger, logLines, type Logger, type LoggerSetting } from './logger.js';

export interface AppOptions {
  /** pino options (e.g. `{ level, stream }`) for the one logger every part and the server share, or false to log nothing (tests). */
  logger?: LoggerSetting;
  /** Run scheduled daemon agents (default true; `cairn serve --no-daemons` turns them off). */
  daemons?: boolean;
  /** Reconnect backoff for MCP servers (tests shorten it). */
  mcpBackoff?: McpBackoff;
  /** The built web console (default: `dist/console/`); not served when it was not built. */
  consoleDir?: string;
  /** Reload agents when agents/ changes (`cairn serve` turns it on; POST /agents/reload works either way). */
  watchAgents?: boolean;
  /** Shown every model call with its request and response (`cairn eval compaction` reads them). */
  observeModelCall?: ModelCallObserver;
  /**
   * Wraps the sessions' lock (tests hold a slot's release, to see what work
   * in the slot wrote before it let the next work in).
   */
  decorateSessionLock?: (lock: SessionLock) => SessionLock;
  /**
   * Told as each step of building and starting begins (tests throw here, to
   * find what a failed step leaves open: nothing).
   */
  beforeStep?: (step: AppStep) => void;
}

/** The steps `buildApp` and `start` take, in order. */
export const APP_STEPS = [
  'agents',
  'storage',
  'observers',
  'models',
  'tools',
  'context',
  'runtime',
  'server',
  'start:shared',
  'start:recovery',
  'start:tools',
  'start:daemons',
] as const;

export type AppStep = (typeof APP_STEPS)[number];

export interface CairnApp {
  readonly settings: Settings;
  readonly server: FastifyInstance;
  /** Sessions' lifecycle. */
  readonly sessions: Sessions;
  /** Runs turns; the one holder of the session lock. */
  readonly engine: TurnEngine;
  /** Chat turns, as the chat route, MCP and the CLI run them. */
  readonly chats: ChatTurns;
  readonly store: Store;
  readonly agents: AgentRegistry;
  readonly events: EventBus;
  /** The sessions' lock: one turn (or reset, close, cancel) per session at a time. */
  readonly sessionLock: SessionLock;
  /** This process's id among the instances sharing one database; `/health` reports it. */
  readonly instanceId: string;
  readonly tasks: TaskRunner;
  readonly daemons: DaemonScheduler;
  readonly mcp: McpManager;
  readonly agentProblems: readonly AgentProblem[];
  /** The background walk that embeds stored messages; undefined without an `embed` role. */
  readonly embeddingBacklog: EmbeddingBacklog | undefined;
  /**
   * Starts the background work (see `start`); a step that fails closes
   * everything and rejects. Once only.
   */
  start(): Promise<void>;
  /**
   * Resolves once every MCP server has connected or failed once and the
   * agents' MCP entries are checked (start-up does not wait for that).
   */
  mcpSettled(): Promise<void>;
  /** Stops accepting work, waits for running turns, closes the database. */
  close(): Promise<void>;
}

/** The summary message the context builder injects: its end is a prompt-cache breakpoint. */
const isSummaryMessage = (message: ChatMessage): boolean =>
  message.role === 'user' && (message.content ?? '').startsWith(SUMMARY_PREFIX);

/** Automatic recall's block: made for one call, so the history before it is the cached prefix. */
const isRecallBlock = (message: ChatMessage): boolean =>
  message.role === 'user' && (message.content ?? '').startsWith(RECALL_OPEN);

/**
 * The client of one model endpoint of a role (no fallbacks, no decorators):
 * what the server calls, and what `cairn doctor` sends its test request through.
 */
export function createEndpoint(role: ModelRoleSettings, logger: ModelLogger): ModelClient {
  switch (role.provider) {
    case 'offline':
      return new OfflineModel(role.contextWindow);
    case 'anthropic':
      return lazyModel(role.model, role.contextWindow, async () => {
        const { AnthropicModel } = await import('./llm/anthropic-model.js');
        return new AnthropicModel({
          role,
          logger,
          cacheHints: { isSummary: isSummaryMessage, isPerCall: isRecallBlock },
        });
      });
    case 'openai':
      return new OpenAIModel({ role, logger });
  }
}

/** A role's model: its endpoint, behind a fallback chain when the role lists fallbacks. */
function createModel(
  role: ModelRoleSettings,
  logger: ModelLogger,
  breaker: CircuitBreaker,
): ModelClient {
  const fallbacks = role.fallbacks ?? [];
  if (fallbacks.length === 0) return createEndpoint(role, logger);
  return new FallbackChain({
    links: [role, ...fallbacks].map((settings) => ({
      settings,
      client: createEndpoint(settings, logger),
    })),
    breaker,
    logger,
  });
}

function observed(role: ModelRole, model: ModelClient, observer?: ModelCallObserver): ModelClient {
  return observer ? observeModel(role, model, observer) : model;
}

/**
 * The store `settings.database` selects: Postgres when a URL is set (migrated here), else SQLite.
 * With `instanceId`, the store writes it as the owner of the tasks it sets running.
 */
export async function openStore(
  settings: Settings,
  instanceId?: string,
  warn?: (details: Record<string, unknown>, message: string) => void,
): Promise<Store> {
  const { url, poolSize, path, cacheMb } = settings.database;
  const owner = instanceId === undefined ? {} : { instanceId };
  if (url !== null) {
    // Loaded only for Postgres: the driver is ~16 MB resident that SQLite never needs.
    const { PgStore } = await import('./store/postgres/pg-store.js');
    return PgStore.open(url, { poolSize, ...owner });
  }
  return new SqliteStore(path, {
    cacheMb,
    ...owner,
    ...(warn
      ? {
          onCheckpointFallback: (reason: string) =>
            warn({ reason }, 'WAL checkpoints run on the server connection again'),
        }
      : {}),
  });
}

/**
 * What an instance adds on a database shared with peers: the
 * session lock the instances share, its heartbeat (and the sweep for a dead
 * peer's tasks), and the feed of every instance's events.
 */
interface SharedDatabase {
  readonly lock: AdvisorySessionLock;
  readonly heartbeat: InstanceHeartbeat;
  readonly feed: SharedEventFeed;
}

/** The agents in agents/, and the ones that were skipped with why. */
interface LoadedAgents {
  readonly registry: AgentRegistry;
  readonly problems: readonly AgentProblem[];
  /** Every file's tool list, skipped files' too: checked at start, once MCP servers run. */
  readonly toolLists: readonly AgentToolList[];
}

/** The database and what rides on it: the event bus and the session lock. */
interface Storage {
  /** This process's id among the instances sharing one database. */
  readonly instanceId: string;
  readonly store: Store;
  readonly events: EventBus;
  readonly sessionLock: SessionLock;
  /** Only on Postgres, where other instances may share the database. */
  readonly shared: SharedDatabase | undefined;
  /** Keys' token reservations, in the database every instance shares. */
  readonly budget: Budget;
}

/** What watches from the outside: metrics, traces, and the record of every model call. */
interface Observers {
  readonly metrics: CairnMetrics;
  readonly tracing: Tracing;
  readonly recorder: CallRecorder;
  readonly recordsPruner: RecordPruner;
}

/** One model client per role; roles with the same settings share one. */
interface Models {
  readonly main: ModelClient;
  readonly compact: ModelClient;
  readonly title: ModelClient;
}

/**
 * The tool catalog and the MCP servers behind its `mcp:` entries. Its
 * `agent:` entries run the runtime, which needs the catalog first:
 * `subagents` is bound once the runtime step has built them.
 */
interface Tools {
  readonly catalog: ToolCatalog;
  readonly mcp: McpManager;
  readonly subagents: LateBinding<Pick<Subagents, 'tool'>>;
}

/** How a session's context is kept within the window: compaction, and recall of what it cut. */
interface ContextCare {
  readonly compaction: DefaultCompaction;
  readonly autoCompaction: AutoCompaction;
  /** Summaries prepared off the turn, landed at the next turn's start. */
  readonly background: BackgroundCompaction;
  readonly recall: AutomaticRecall;
  /** The `embed` role's client and background walk; absent when no embed role is configured. */
  readonly embedding?: { readonly client: EmbeddingClient; readonly backlog: EmbeddingBacklog };
}

/** Sessions and turns, and the tasks, subagents, daemons and reloads that run them. */
interface RuntimeParts {
  readonly approvalTimeouts: ApprovalTimeouts;
  readonly engine: TurnEngine;
  readonly sessions: Sessions;
  readonly chats: ChatTurns;
  readonly subagents: Subagents;
  readonly tasks: TaskRunner;
  readonly daemons: DaemonScheduler;
  readonly agentReloader: AgentReloader;
}

/** The agents, once loaded and registered; a broken agent is skipped and reported at start. */
function loadAgentRegistry(settings: Settings): LoadedAgents {
  const { agents, problems, toolLists } = loadAgents(settings.agentsDir);
  return { registry: new AgentRegistry(agents, problems), problems, toolLists };
}

/** Opens the database `settings.database` selects, with the event bus and the turn slots on it. */
async function openStorage(
  settings: Settings,
  logger: Logger,
  decorateLock: AppOptions['decorateSessionLock'],
): Promise<Storage> {
  const { warn } = logLines(logger);
  const instanceId = newInstanceId();
  const store = await openStore(settings, instanceId, warn);
  const events = new EventBus(store);
  const databaseUrl = settings.database.url;
  let shared: SharedDatabase | undefined;
  if (databaseUrl !== null) {
    // Their connections use the Postgres driver, loaded only for a shared database.
    const [{ AdvisorySessionLock }, { SharedEventFeed }] = await Promise.all([
      import('./coordination/advisory-session-lock.js'),
      import('./coordination/shared-event-feed.js'),
    ]);
    shared = {
      lock: new AdvisorySessionLock({ connectionString: databaseUrl, instanceId, log: warn }),
      heartbeat: new InstanceHeartbeat({ store, instanceId, log: warn }),
      feed: new SharedEventFeed({
        connectionString: databaseUrl,
        instanceId,
        store,
        deliver: (delivered) => events.deliverShared(delivered),
        listening: () => events.following,
        log: warn,
      }),
    };
  }
  if (shared) events.useSharedFeed(shared.feed);
  // On a shared database the turn slot is shared by the instances too.
  const lock: SessionLock = shared ? shared.lock : new KeyedQueue();
  const sessionLock = decorateLock ? decorateLock(lock) : lock;
  const budget = new KeyReservations({
    store,
    instanceId,
    ...(shared ? { staleAfterMs: shared.heartbeat.staleAfterMs } : {}),
  });
  return { instanceId, store, events, sessionLock, shared, budget };
}

/** Metrics, tracing and call records, each listening where it needs to. */
async function buildObservers(
  settings: Settings,
  { store, events, sessionLock }: Storage,
  logger: Logger,
): Promise<Observers> {
  const { info, warn } = logLines(logger);
  // Gauges read the turn slots and the bus when scraped.
  const metrics = new CairnMetrics({
    queueDepth: () => sessionLock.size,
    openEventStreams: () => events.subscriberCount,
  });
  events.observe((event) => metrics.observeEvent(event));
  events.observe(eventLogger(info));
  // The OpenTelemetry SDK is loaded only when traces go somewhere.
  const otlp = settings.telemetry.otlp;
  const tracing: Tracing = otlp
    ? (await import('./telemetry/otel-tracing.js')).createOtelTracing(otlp)
    : NO_TRACING;
  // Every call of a session on the record, whatever the provider (inside the metrics, which count its cost).
  const recorder = new CallRecorder({ store, enabled: settings.records.enabled, warn });
  const recordsPruner = new RecordPruner({
    store,
    keepDays: settings.records.keepDays,
    warn,
  });
  return { metrics, tracing, recorder, recordsPruner };
}

/** Each role's model client, wrapped (inside out) in the call record, the metrics and tracing. */
function buildModels(
  settings: Settings,
  { metrics, tracing, recorder }: Observers,
  logger: Logger,
  observeModelCall: ModelCallObserver | undefined,
): Models {
  // One breaker for every role: an endpoint that is down is down for all of them.
  const breaker = new CircuitBreaker();
  const modelFor = (role: ModelRole): ModelClient => {
    const roleSettings = settings.models[role];
    const recorded = recorder.instrument(
      observed(role, createModel(roleSettings, logger, breaker), observeModelCall),
      roleSettings,
    );
    // Outermost: a request that cannot fit the window is refused before it is
    // traced, counted or recorded as a call (it never was one).
    return checkWindow(
      traceModel(metrics.instrumentModel(role, recorded), tracing, roleSettings.provider),
      { role, defaultOutputTokens: defaultOutputTokens(roleSettings) },
    );
  };
  const main = modelFor('main');
  const compact = settings.models.compact === settings.models.main ? main : modelFor('compact');
  const title = settings.models.title === settings.models.compact ? compact : modelFor('title');
  return { main, compact, title };
}

/** The MCP servers and the catalog that resolves an agent's `tools` list. */
function buildTools(settings: Settings, logger: Logger, mcpBackoff: McpBackoff | undefined): Tools {
  const mcp = new McpManager({
    servers: settings.mcpServers,
    log: logger,
    ...(mcpBackoff ? { backoff: mcpBackoff } : {}),
  });
  const subagents = new LateBinding<Pick<Subagents, 'tool'>>('Subagents (for agent: tools)');
  const catalog = new ToolCatalog({
    builtins: builtinTools(),
    subagent: (caller, name) => subagents.get().tool(caller, name),
    mcp,
  });
  mcp.onToolsChanged(() => catalog.invalidate());
  return { catalog, mcp, subagents };
}

/** Compaction (on request and at the agent's threshold) and automatic recall of what it cut. */
function buildContextCare(
  settings: Settings,
  { store, events, budget, instanceId, shared }: Storage,
  agents: LoadedAgents,
  models: Models,
  observers: Observers,
  logger: Logger,
): ContextCare {
  const { tracing } = observers;
  const compaction = new DefaultCompaction({
    store,
    events,
    agents: agents.registry,
    model: models.compact,
    tracing,
    budget,
  });
  const recallLedger = new RecallLedger();
  const background = new BackgroundCompaction({
    store,
    compaction,
    instanceId,
    // Alone on SQLite no peer heartbeats: any other holder is a process that is gone.
    staleAfterMs: shared?.heartbeat.staleAfterMs ?? STALE_AFTER_MS,
    logger,
  });
  const autoCompaction = new AutoCompaction({
    compaction,
    contextWindow: settings.models.main.contextWindow,
    logger,
    recalledTokens: (sessionId) => recallLedger.tokens(sessionId),
    background,
    outputTokens: defaultOutputTokens(settings.models.main),
  });
  const embedding = buildEmbedding(settings, store, budget, observers, logger);
  // SQLite gives a deleted session's newest message ids to the next messages,
  // behind the walk's cursor: after a delete the walk starts over.
  if (embedding)
    events.observe((event) => {
      if (event.type === 'session.deleted') embedding.backlog.rewind();
    });
  const recall = new AutomaticRecall({
    store,
    contextWindow: settings.models.main.contextWindow,
    estimate: (turn, messages) => autoCompaction.estimate(turn, messages),
    ledger: recallLedger,
    ...(embedding ? { vectors: embedding.vectors } : {}),
  });
  return {
    compaction,
    autoCompaction,
    background,
    recall,
    ...(embedding ? { embedding: { client: embedding.client, backlog: embedding.backlog } } : {}),
  };
}

/**
 * The `embed` role, when configured: its client (the local model's worker
 * is started on first use), every call recorded and counted, the background
 * walk that embeds stored messages, and the vector half of hybrid recall.
 * A `local` role without its optional packages fails here, at start.
 */
function buildEmbedding(
  settings: Settings,
  store: Store,
  budget: Budget,
  { metrics, recorder }: Observers,
  logger: Logger,
): { client: EmbeddingClient; backlog: EmbeddingBacklog; vectors: VectorRecall } | undefined {
  const role = settings.models.embed;
  if (role === null) return undefined;
  const { warn } = logLines(logger);
  const client: EmbeddingClient =
    role.provider === 'local'
      ? new LocalEmbeddings(resolveLocalModel(), role.timeoutMs)
      : new OpenAiEmbeddings(role);
  const embedder = new Embedder({ client, role, recorder, metrics, store, budget });
  const backlog = new EmbeddingBacklog({ store, embedder, warn });
  const vectors = new VectorRecall({
    store,
    embedder,
    warn,
    degraded: (reason) => metrics.recallDegradedTo(reason),
  });
  return { client, backlog, vectors };
}

/** Everything the runtime step is built from. */
interface RuntimeInputs {
  readonly agents: LoadedAgents;
  readonly storage: Storage;
  readonly observers: Observers;
  readonly models: Models;
  readonly tools: Tools;
  readonly context: ContextCare;
}

/**
 * The runtime and the parts that run turns through it: subagents, tasks,
 * daemons, approval timeouts, and the agent reloader. Binds the tools'
 * subagent port, so `agent:` tools work from here on.
 */
function buildRuntime(
  settings: Settings,
  { agents, storage, observers, models, tools, context }: RuntimeInputs,
  logger: Logger,
): RuntimeParts {
  const { debug, info, warn, error } = logLines(logger);
  const { store, events, sessionLock, instanceId, budget } = storage;
  const registry = agents.registry;
  // A timed-out approval is denied through the task runner, which itself arms the timeouts.
  const approvalDecisions = new LateBinding<Pick<TaskRunner, 'decideApproval'>>(
    'TaskRunner (for approval timeouts)',
  );
  const approvalTimeouts = new ApprovalTimeouts({
    store,
    deny: (taskId) =>
      approvalDecisions.get().decideApproval({ taskId, decision: 'deny', timedOut: true }),
    log: warn,
  });
  const engine = new TurnEngine({
    approvalTimer: approvalTimeouts,
    store,
    // The one holder of the store's writes for turns: the engine opens a port per slot.
    writer: new TurnWriter(store, events),
    lock: sessionLock,
    model: models.main,
    tools: tools.catalog,
    events,
    contextGuard: context.autoCompaction,
    contextRecall: context.recall,
    systemContext: memoryContext(store),
    observer: { toolResult: (note) => observers.metrics.toolCall(note.tool, note.isError) },
    tracing: observers.tracing,
    afterTurn: () => observers.recorder.flush(),
    records: observers.recorder,
    // A call asks for the role's maxOutputTokens (Anthropic: its default when unset).
    budget: {
      budget,
      defaultOutputTokens:
        settings.models.main.maxOutputTokens ?? defaultOutputTokens(settings.models.main),
    },
  });
  const sessions = new Sessions({ store, agents: registry, events, slots: engine });
  const chats = new ChatTurns({
    sessions,
    engine,
    agents: registry,
    observer: { chatTurn: chatTurnLogger(info) },
    titler: new SessionTitler({ store, model: models.title, budget, warn }),
  });
  const subagents = new Subagents({ sessions, engine, agents: registry });
  tools.subagents.bind(subagents);
  const tasks = new TaskRunner({
    sessions,
    engine,
    agents: registry,
    store,
    events,
    log: error,
    approvalTimer: approvalTimeouts,
  });
  approvalDecisions.bind(tasks);
  const daemons = new DaemonScheduler({
    sessions,
    agents: registry,
    store,
    events,
    tasks,
    owner: instanceId,
    log: warn,
    debug,
    info,
  });
  const agentReloader = new AgentReloader({
    agentsDir: settings.agentsDir,
    registry,
    resolveTools: (agent) => tools.catalog.forAgent(agent),
    log: info,
    warn,
    // Before `daemons.start()` (and with daemons off) this does nothing.
    afterReload: () => daemons.sync(),
  });
  return { approvalTimeouts, engine, sessions, chats, subagents, tasks, daemons, agentReloader };
}

/** Everything the HTTP server's routes are given. */
interface ServerInputs {
  readonly agents: LoadedAgents;
  readonly storage: Storage;
  readonly observers: Observers;
  readonly tools: Tools;
  readonly context: ContextCare;
  readonly parts: RuntimeParts;
}

/** The fastify instance with its cross-cutting hooks, then every route group as a plugin. */
function buildServer(
  settings: Settings,
  { agents, storage, observers, tools, context, parts }: ServerInputs,
  logger: Logger,
  consoleDir: string,
): FastifyInstance {
  const { store, events, instanceId } = storage;
  const { metrics, recorder } = observers;
  const { engine, sessions, chats, tasks, agentReloader } = parts;
  const registry = agents.registry;
  // Principals: client keys, what each may reach, and its limits.
  const { warn } = logLines(logger);
  const clientKeys = new ClientKeys(store, { warn });
  const access = new Access(store);
  // Each key's share of this instance's streams, imports and model-running requests.
  const shares = new KeyShares({
    maxStreams: defaultStreamShare(settings.server.maxStreams),
    maxImports: DEFAULT_KEY_IMPORTS,
  });
  const server = createServer({
    apiKey: settings.server.apiKey,
    browser: {
      allowedHosts: defaultAllowedHosts(settings.server),
      corsOrigins: settings.server.corsOrigins,
      publicOrigin:
        settings.server.publicUrl === null ? null : new URL(settings.server.publicUrl).origin,
    },
    clientKeys,
    ownership: { access, limits: new KeyLimits(store), shares },
    bodyLimitBytes: settings.server.bodyLimitBytes,
    requestTimeoutMs: settings.server.requestTimeoutMs,
    trustProxy: settings.server.trustProxy,
    rateLimit: settings.server.rateLimit,
    logger,
  });
  const isAgent = (name: string): boolean => registry.find(name) !== undefined;
  // At the root, before the plugins: it measures the chat and /v1 routes.
  registerTurnMetrics(server, { metrics, isAgent });
  // One gate for every kind of stream: the cap is on open connections.
  const streams = new StreamGate(
    {
      maxStreams: settings.server.maxStreams,
      maxBufferedBytes: settings.server.streamBufferBytes,
    },
    warn,
    shares,
  );
  const mcp = tools.mcp;
  const healthExtras = mcp.serverNames().length > 0 ? () => ({ mcp: mcp.health() }) : undefined;

  // Every route group of the server, in this order.
  void server.register(healthRoutes, {
    store,
    instanceId,
    ...(healthExtras ? { healthExtras } : {}),
  });
  void server.register(agentRoutes, {
    agents: registry,
    mainModel: settings.models.main,
    toolsNotReady: (entries) => mcp.notReady(entries),
  });
  void server.register(chatRoutes, { chats, sessions, agents: registry, streams });
  void server.register(sessionRoutes, { sessions, store });
  void server.register(callRoutes, { access, store, flush: () => recorder.flush() });
  void server.register(eventRoutes, { store, events, streams });
  void server.register(mcpRoutes, { chats, agents: registry, access });
  void server.register(taskRoutes, { tasks, store });
  void server.register(memoryRoutes, { agents: registry, store });
  void server.register(openaiApiRoutes, {
    sessions,
    engine,
    agents: registry,
    access,
    store,
    streams,
  });
  void server.register(sessionTransferRoutes, {
    agents: registry,
    store,
    access,
    events,
    shares,
    importMaxBytes: settings.server.importMaxBytes,
    importAllowance: new ImportAllowance(settings.server.importDayBytes),
  });
  void server.register(keyRoutes, { keys: clientKeys, store, events });
  void server.register(metricsRoutes, { metrics });
  void server.register(agentReloadRoutes, { reload: () => agentReloader.reload() });
  void server.register(compactionRoutes, {
    sessions,
    engine,
    agents: registry,
    store,
    compaction: context.compaction,
    background: context.background,
    contextWindow: settings.models.main.contextWindow,
  });
  void server.register(a2aRoutes, {
    agents: registry,
    tasks,
    store,
    events,
    streams,
    keyRequired: settings.server.apiKey !== null,
  });
  void server.register(aiSdkRoutes, {
    agents: registry,
    sessions,
    engine,
    store,
    events,
    streams,
    // Alone on SQLite no peer heartbeats: any other holder is a process that is gone.
    liveness: {
      self: instanceId,
      staleAfterMs: storage.shared?.heartbeat.staleAfterMs ?? STALE_AFTER_MS,
    },
    shared: storage.shared !== undefined,
  });
  void server.register(agUiRoutes, { agents: registry, sessions, engine, store, events, streams });
  if (consoleBuilt(consoleDir)) void server.register(consoleRoutes, { dir: consoleDir });
  else logger.warn(`web console not built in ${consoleDir}: run npm run build`);
  return server;
}

/** Everything `start` sets going, and `close` stops. */
interface BuiltApp {
  readonly agents: LoadedAgents;
  readonly storage: Storage;
  readonly observers: Observers;
  readonly tools: Tools;
  readonly parts: RuntimeParts;
  readonly server: FastifyInstance;
  readonly context: ContextCare;
  /** The MCP servers' first attempts and the checks after them, running in the background. */
  mcpChecks?: Promise<void>;
}

/**
 * Start-up, in order: the agents watch, the shared database's heartbeat and
 * feed, recovery of what the last process left running, approval deadlines,
 * the tool-list checks, MCP servers (in the background), daemons, and record
 * pruning.
 */
async function start(built: BuiltApp, options: AppOptions, logger: Logger): Promise<void> {
  const { storage, observers, tools, parts } = built;
  const { store, shared, instanceId } = storage;
  const registry = built.agents.registry;
  const step = (name: AppStep) => options.beforeStep?.(name);
  if (options.watchAgents === true) parts.agentReloader.watch();
  step('start:shared');
  if (shared) {
    await shared.heartbeat.start();
    await shared.feed.start();
  }
  step('start:recovery');
  // Beside live peers only a dead instance's tasks are orphans; alone on SQLite, everything is.
  const recovered = shared
    ? await recoverOrphanedWork(store, {
        self: instanceId,
        staleAfterMs: shared.heartbeat.staleAfterMs,
      })
    : await recoverAfterRestart(store);
  if (recovered.interruptedTasks > 0)
    logger.warn(
      `${recovered.interruptedTasks} task(s) were running when the server stopped; marked interrupted`,
    );
  if (recovered.closedDaemonSessions > 0 || recovered.releasedDaemonLeases > 0)
    logger.warn(recovered, 'closed out daemon ticks that died with the previous process');
  // After the orphan sweep: a deadline that passed while the server was down is applied now.
  await parts.approvalTimeouts.recover();
  step('start:tools');
  // Fail early and visibly on tool lists that cannot be resolved (the same check as
  // `cairn agents validate`), each file's problems together, top to bottom. MCP
  // entries resolve to nothing yet: they are checked once their servers answer.
  const resolveTools = (agent: AgentConfig) => tools.catalog.forAgent(agent);
  const toolProblems = await checkAgentTools(built.agents.toolLists, resolveTools);
  const logged = new Set<string>();
  for (const problem of orderProblems([...built.agents.problems, ...toolProblems])) {
    const skipped = built.agents.problems.some((p) => p.file === problem.file);
    const line = `${skipped ? 'agent skipped: ' : ''}${formatProblem(problem)}`;
    logged.add(line);
    logger.warn(line);
  }
  // MCP servers connect in the background: one that never answers must not
  // keep the server from listening (each attempt is bounded by its
  // connectTimeoutMs). Its tools are missing until then; GET /agents/:name
  // lists them under `toolsNotReady`.
  built.mcpChecks = tools.mcp
    .start()
    .then(async () => {
      const mcpProblems = checkMcpToolEntries(registry.list(), tools.mcp);
      for (const problem of [...mcpProblems.errors, ...mcpProblems.warnings]) logger.warn(problem);
      // With the servers' tools known, a whole-server entry may now offer too many.
      const withMcp = built.agents.toolLists.filter((list) => usesMcp([list.agent]));
      for (const problem of orderProblems(await checkAgentTools(withMcp, resolveTools))) {
        const line = formatProblem(problem);
        if (!logged.has(line)) logger.warn(line);
      }
    })
    .catch((err: unknown) =>
      logger.warn(`checking agents' MCP tools failed: ${describeError(err)}`),
    );
  step('start:daemons');
  if (options.daemons !== false) await parts.daemons.start();
  observers.recordsPruner.start();
  built.context.embedding?.backlog.start();
}

/** Stops accepting work, waits for running turns, then closes what they used, database last. */
async function close(built: BuiltApp): Promise<void> {
  const { storage, observers, tools, parts, server } = built;
  parts.agentReloader.close();
  parts.approvalTimeouts.close();
  await parts.daemons.stop();
  await server.close();
  await parts.tasks.drain();
  await parts.engine.drain();
  await observers.recordsPruner.stop();
  await built.context.embedding?.backlog.close();
  await built.context.embedding?.client.close();
  // After the turns: a running turn may still be calling an MCP tool.
  await tools.mcp.close();
  await built.mcpChecks?.catch(() => undefined);
  // The titles and records of the last turns, before the database goes.
  await observers.recorder.flush();
  await observers.tracing.shutdown();
  await closeStorage(storage);
}

/**
 * What the steps of `buildApp` opened so far, closed in the reverse order
 * when a later step fails: a failed build leaves no connection, file handle,
 * exporter or child process behind.
 */
class OpenedParts {
  private readonly closers: (() => Promise<void>)[] = [];

  add(close: () => Promise<void>): void {
    this.closers.push(close);
  }

  async closeAll(): Promise<void> {
    for (const close of this.closers.reverse()) await close().catch(() => undefined);
  }
}

/** Closes the database and what rides on it (the shared lock, feed and heartbeat). */
async function closeStorage(storage: Storage): Promise<void> {
  if (storage.shared) {
    await storage.shared.feed.close();
    await storage.shared.lock.close();
    await storage.shared.heartbeat.stop();
  }
  await storage.store.close();
}

/**
 * Builds the server from `settings`, each step from what the steps before it
 * returned; starts nothing (`app.start()` does, or `startApp`). The logger
 * comes first, so every part logs from the moment it exists. A step that
 * throws closes what the steps before it opened.
 */
export async function buildApp(settings: Settings, options: AppOptions = {}): Promise<CairnApp> {
  const logger = createLogger(options.logger ?? false);
  const step = (name: AppStep) => options.beforeStep?.(name);
  const opened = new OpenedParts();
  try {
    step('agents');
    const agents = loadAgentRegistry(settings);
    step('storage');
    const storage = await openStorage(settings, logger, options.decorateSessionLock);
    opened.add(() => closeStorage(storage));
    step('observers');
    const observers = await buildObservers(settings, storage, logger);
    opened.add(() => observers.tracing.shutdown());
    step('models');
    const models = buildModels(settings, observers, logger, options.observeModelCall);
    step('tools');
    const tools = buildTools(settings, logger, options.mcpBackoff);
    opened.add(() => tools.mcp.close());
    step('context');
    const context = buildContextCare(settings, storage, agents, models, observers, logger);
    step('runtime');
    const parts = buildRuntime(
      settings,
      { agents, storage, observers, models, tools, context },
      logger,
    );
    step('server');
    const server = buildServer(
      settings,
      { agents, storage, observers, tools, context, parts },
      logger,
      options.consoleDir ?? DEFAULT_CONSOLE_DIR,
    );
    opened.add(() => server.close());
    const built: BuiltApp = { agents, storage, observers, tools, parts, server, context };
    let started: Promise<void> | undefined;
    return {
      settings,
      server,
      sessions: parts.sessions,
      engine: parts.engine,
      chats: parts.chats,
      store: storage.store,
      agents: agents.registry,
      events: storage.events,
      sessionLock: storage.sessionLock,
      instanceId: storage.instanceId,
      agentProblems: agents.problems,
      tasks: parts.tasks,
      daemons: parts.daemons,
      mcp: tools.mcp,
      embeddingBacklog: context.embedding?.backlog,
      start: () =>
        (started ??= start(built, options, logger).catch(async (err: unknown) => {
          await close(built).catch(() => undefined);
          throw err;
        })),
      mcpSettled: async () => {
        await started;
        await built.mcpChecks;
      },
      close: () => close(built),
    };
  } catch (err) {
    await opened.closeAll();
    throw err;
  }
}

/** Builds the server and starts it: what `cairn serve`, the tools and the tests run. */
export async function startApp(settings: Settings, options: AppOptions = {}): Promise<CairnApp> {
  const app = await buildApp(settings, options);
  await app.start();
  return app;
}
