/**
 * The composition root: builds the whole server from a `Settings` object.
 * The only module that names concrete implementations. Never listens — the
 * CLI does, and tests use `app.server.inject` or listen on port 0.
 */
import type { FastifyInstance, FastifyServerOptions } from 'fastify';
import { AgentRegistry } from './agents/agent-registry.js';
import { formatProblem, loadAgents } from './agents/load-agents.js';
import type { AgentProblem } from './agents/agent-config.js';
import type { ModelRoleSettings, Settings } from './config/settings.js';
import { createServer } from './http/create-server.js';
import { defaultAllowedHosts } from './http/browser-guard.js';
import { compactionRoutes } from './http/routes/compaction.js';
import { AutoCompaction } from './compaction/auto-compaction.js';
import { DefaultCompaction } from './compaction/default-compaction.js';
import { AutomaticRecall } from './recall/automatic-recall.js';
import { RecallLedger } from './recall/recall-ledger.js';
import type { ModelClient } from './llm/model-client.js';
import { OfflineModel } from './llm/offline-model.js';
import { observeModel, type ModelCallObserver, type ModelRole } from './llm/observed-model.js';
import { OpenAIModel } from './llm/openai-model.js';
import { AnthropicModel } from './llm/anthropic-model.js';
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
import { Sessions } from './runtime/sessions.js';
import { ChatTurns } from './runtime/chat-turns.js';
import { SqliteStore } from './store/sqlite/sqlite-store.js';
import { PgStore } from './store/postgres/pg-store.js';
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
import { AdvisorySessionLock } from './coordination/advisory-session-lock.js';
import { InstanceHeartbeat } from './coordination/instance-heartbeat.js';
import { SharedEventFeed } from './coordination/shared-event-feed.js';
import { memoryRoutes } from './http/routes/memory.js';
import { taskRoutes } from './http/routes/tasks.js';
import { mcpRoutes } from './http/routes/mcp.js';
import type { McpBackoff } from './mcp/mcp-connection.js';
import { McpManager } from './mcp/mcp-manager.js';
import { checkMcpToolEntries } from './mcp/check-agent-tools.js';
import { openaiApiRoutes } from './openai-api/routes.js';
import { consoleBuilt, consoleRoutes, DEFAULT_CONSOLE_DIR } from './http/routes/console.js';
import { sessionTransferRoutes } from './http/routes/session-transfer.js';
import { metricsRoutes } from './http/routes/metrics.js';
import { agentReloadRoutes, agentRoutes } from './http/routes/agents.js';
import { chatRoutes } from './http/routes/chat.js';
import { eventRoutes } from './http/routes/events.js';
import { healthRoutes } from './http/routes/health.js';
import { sessionRoutes } from './http/routes/sessions.js';
import { callRoutes } from './http/routes/calls.js';
import { AgentReloader } from './agents/agent-reloader.js';
import { a2aRoutes } from './a2a/routes.js';
import { CairnMetrics } from './metrics/metrics.js';
import { CallRecorder } from './records/call-recorder.js';
import { RecordPruner } from './records/record-pruner.js';
import { NO_TRACING, type Tracing } from './telemetry/tracing.js';
import { traceModel } from './telemetry/traced-model.js';
import { ClientKeys } from './http/client-keys.js';
import { KeyLimits } from './http/key-limits.js';
import { Access } from './http/access.js';
import { keyRoutes } from './http/routes/keys.js';

export interface AppOptions {
  /** fastify's logger option (pino options, e.g. `{ level, stream }`), or false to log nothing (tests). */
  logger?: FastifyServerOptions['logger'];
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
}

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
  /** Stops accepting work, waits for running turns, closes the database. */
  close(): Promise<void>;
}

/** The summary message the context builder injects: its end is a prompt-cache breakpoint. */
const isSummaryMessage = (message: ChatMessage): boolean =>
  message.role === 'user' && (message.content ?? '').startsWith(SUMMARY_PREFIX);

function createEndpoint(role: ModelRoleSettings, logger: ModelLogger): ModelClient {
  switch (role.provider) {
    case 'offline':
      return new OfflineModel(role.contextWindow);
    case 'anthropic':
      return new AnthropicModel({ role, logger, cacheHints: { isSummary: isSummaryMessage } });
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
export async function openStore(settings: Settings, instanceId?: string): Promise<Store> {
  const { url, poolSize, path, cacheMb } = settings.database;
  const owner = instanceId === undefined ? {} : { instanceId };
  if (url !== null) return PgStore.open(url, { poolSize, ...owner });
  return new SqliteStore(path, { cacheMb, ...owner });
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

export async function buildApp(settings: Settings, options: AppOptions = {}): Promise<CairnApp> {
  const { agents, problems } = loadAgents(settings.agentsDir);
  const registry = new AgentRegistry(agents, problems);
  const instanceId = newInstanceId();
  const store = await openStore(settings, instanceId);
  const events = new EventBus(store);

  // The server's logger is created by fastify; model clients log through it.
  const logTarget: { server?: FastifyInstance } = {};
  const warn = (details: Record<string, unknown>, message: string): void =>
    logTarget.server?.log.warn(details, message);
  const databaseUrl = settings.database.url;
  const shared: SharedDatabase | undefined =
    databaseUrl === null
      ? undefined
      : {
          lock: new AdvisorySessionLock({ connectionString: databaseUrl, instanceId, log: warn }),
          heartbeat: new InstanceHeartbeat({ store, instanceId, log: warn }),
          feed: new SharedEventFeed({
            connectionString: databaseUrl,
            instanceId,
            store,
            deliver: (delivered) => events.deliverShared(delivered),
            log: warn,
          }),
        };
  if (shared) events.useSharedFeed(shared.feed);
  // On a shared database the turn slot is shared by the instances too.
  const sessionLock: SessionLock = shared ? shared.lock : new KeyedQueue();
  const mcp = new McpManager({
    servers: settings.mcpServers,
    log: {
      info: (message) => logTarget.server?.log.info(message),
      warn: (message) => logTarget.server?.log.warn(message),
    },
    ...(options.mcpBackoff ? { backoff: options.mcpBackoff } : {}),
  });
  const tools: ToolCatalog = new ToolCatalog({
    builtins: builtinTools(),
    // Bound late: the runtime needs the catalog, and subagent tools need the runtime.
    subagent: (caller, name) => subagents.tool(caller, name),
    mcp,
  });
  mcp.onToolsChanged(() => tools.invalidate());
  const modelLogger: ModelLogger = { warn };
  // Gauges read the turn slots and the bus when scraped.
  const metrics: CairnMetrics = new CairnMetrics({
    queueDepth: () => sessionLock.size,
    openEventStreams: () => events.subscriberCount,
  });
  events.observe((event) => metrics.observeEvent(event));
  // The OpenTelemetry SDK is loaded only when traces go somewhere.
  const otlp = settings.telemetry.otlp;
  const tracing: Tracing = otlp
    ? (await import('./telemetry/otel-tracing.js')).createOtelTracing(otlp)
    : NO_TRACING;
  // Every call of a session on the record, whatever the provider (inside the metrics, which count its cost).
  const recorder = new CallRecorder({ store, enabled: settings.records.enabled, warn });
  const recordsPruner = new RecordPruner({ store, keepDays: settings.records.keepDays, warn });
  // One breaker for every role: an endpoint that is down is down for all of them.
  const breaker = new CircuitBreaker();
  const modelFor = (role: 'main' | 'compact' | 'title'): ModelClient => {
    const roleSettings = settings.models[role];
    const recorded = recorder.instrument(
      observed(role, createModel(roleSettings, modelLogger, breaker), options.observeModelCall),
      roleSettings,
    );
    return traceModel(metrics.instrumentModel(role, recorded), tracing, roleSettings.provider);
  };
  const mainModel = modelFor('main');
  const compactModel =
    settings.models.compact === settings.models.main ? mainModel : modelFor('compact');
  const titleModel =
    settings.models.title === settings.models.compact ? compactModel : modelFor('title');
  const compaction = new DefaultCompaction({
    store,
    events,
    agents: registry,
    model: compactModel,
    tracing,
  });
  const recallLedger = new RecallLedger();
  const autoCompaction = new AutoCompaction({
    store,
    events,
    compaction,
    contextWindow: settings.models.main.contextWindow,
    logger: modelLogger,
    recalledTokens: (sessionId) => recallLedger.tokens(sessionId),
  });
  const recall = new AutomaticRecall({
    store,
    contextWindow: settings.models.main.contextWindow,
    estimate: (turn, messages) => autoCompaction.estimate(turn, messages),
    ledger: recallLedger,
  });

  // Bound late: a timed-out approval is denied through the task runner, built below.
  const approvalTimeouts: ApprovalTimeouts = new ApprovalTimeouts({
    store,
    deny: (taskId) => tasks.decideApproval({ taskId, decision: 'deny', timedOut: true }),
    log: warn,
  });
  const engine: TurnEngine = new TurnEngine({
    approvalTimer: approvalTimeouts,
    store,
    lock: sessionLock,
    model: mainModel,
    tools,
    events,
    contextGuard: autoCompaction,
    contextRecall: recall,
    systemContext: memoryContext(store),
    observer: { toolResult: (note) => metrics.toolCall(note.tool, note.isError) },
    tracing,
    afterTurn: () => recorder.flush(),
  });
  const sessions = new Sessions({ store, agents: registry, events, slots: engine });
  const chats = new ChatTurns({
    sessions,
    engine,
    agents: registry,
    store,
    observer: {
      chatTurn: chatTurnLogger((details, message) => logTarget.server?.log.info(details, message)),
    },
    titler: new SessionTitler({ store, model: titleModel, warn }),
  });
  const subagents = new Subagents({ sessions, engine, agents: registry });
  const tasks = new TaskRunner({
    sessions,
    engine,
    agents: registry,
    store,
    events,
    log: (details, message) => logTarget.server?.log.error(details, message),
    approvalTimer: approvalTimeouts,
  });
  const daemons = new DaemonScheduler({
    sessions,
    agents: registry,
    store,
    events,
    tasks,
    owner: instanceId,
    log: warn,
    info: (details, message) => logTarget.server?.log.info(details, message),
  });
  // Principals: client keys, what each may reach, and its limits.
  const clientKeys = new ClientKeys(store, { warn });
  const access = new Access(store);
  const consoleDir = options.consoleDir ?? DEFAULT_CONSOLE_DIR;
  const healthExtras = mcp.serverNames().length > 0 ? () => ({ mcp: mcp.health() }) : undefined;
  const server = createServer({
    apiKey: settings.server.apiKey,
    browser: {
      allowedHosts: defaultAllowedHosts(settings.server),
      corsOrigins: settings.server.corsOrigins,
      publicOrigin:
        settings.server.publicUrl === null ? null : new URL(settings.server.publicUrl).origin,
    },
    clientKeys,
    ownership: { access, limits: new KeyLimits(store) },
    bodyLimitBytes: settings.server.bodyLimitBytes,
    rateLimit: settings.server.rateLimit,
    streamLimits: {
      maxStreams: settings.server.maxStreams,
      maxBufferedBytes: settings.server.streamBufferBytes,
    },
    logger: options.logger ?? false,
    // Every route group of the server, registered in this order.
    routes: [
      (app) => healthRoutes(app, { store, instanceId, ...(healthExtras ? { healthExtras } : {}) }),
      (app) => agentRoutes(app, { agents: registry, mainModel: settings.models.main }),
      (app, { streams }) => chatRoutes(app, { chats, sessions, agents: registry, streams }),
      (app) => sessionRoutes(app, { sessions, store }),
      (app) => callRoutes(app, { access, store, flush: () => recorder.flush() }),
      (app, { streams }) => eventRoutes(app, { store, events, streams }),
      (app) => mcpRoutes(app, { chats, agents: registry, access }),
      (app) => taskRoutes(app, { tasks, store }),
      (app) => memoryRoutes(app, { agents: registry, store }),
      (app, { streams }) =>
        openaiApiRoutes(app, { sessions, engine, agents: registry, access, store, streams }),
      (app) => sessionTransferRoutes(app, { agents: registry, store, access, events }),
      (app) => keyRoutes(app, { keys: clientKeys, store, events }),
      (app) =>
        metricsRoutes(app, { metrics, isAgent: (name) => registry.find(name) !== undefined }),
      (app) => agentReloadRoutes(app, { reload: () => agentReloader.reload() }),
      (app) =>
        compactionRoutes(app, {
          sessions,
          engine,
          agents: registry,
          store,
          compaction,
          contextWindow: settings.models.main.contextWindow,
        }),
      (app, { streams }) =>
        a2aRoutes(app, {
          agents: registry,
          tasks,
          store,
          events,
          streams,
          keyRequired: settings.server.apiKey !== null,
        }),
      ...(consoleBuilt(consoleDir)
        ? [(app: FastifyInstance) => consoleRoutes(app, { dir: consoleDir })]
        : []),
    ],
  });
  logTarget.server = server;
  const agentReloader = new AgentReloader({
    agentsDir: settings.agentsDir,
    registry,
    resolveTools: (agent) => tools.forAgent(agent),
    log: (details, message) => server.log.info(details, message),
    warn: (details, message) => server.log.warn(details, message),
    // Before `daemons.start()` (and with daemons off) this does nothing.
    afterReload: () => daemons.sync(),
  });
  if (options.watchAgents === true) agentReloader.watch();
  events.observe(eventLogger((details, message) => server.log.info(details, message)));

  if (!consoleBuilt(consoleDir))
    server.log.warn(`web console not built in ${consoleDir}: run npm run build`);
  for (const problem of problems) server.log.warn(`agent skipped: ${formatProblem(problem)}`);
  if (shared) {
    await shared.heartbeat.start();
    await shared.feed.start();
  }
  // Beside live peers only a dead instance's tasks are orphans; alone on SQLite, everything is.
  const recovered = shared
    ? await recoverOrphanedWork(store, {
        self: instanceId,
        staleAfterMs: shared.heartbeat.staleAfterMs,
      })
    : await recoverAfterRestart(store);
  if (recovered.interruptedTasks > 0)
    server.log.warn(
      `${recovered.interruptedTasks} task(s) were running when the server stopped; marked interrupted`,
    );
  if (recovered.closedDaemonSessions > 0 || recovered.releasedDaemonLeases > 0)
    server.log.warn(recovered, 'closed out daemon ticks that died with the previous process');
  // After the orphan sweep: a deadline that passed while the server was down is applied now.
  await approvalTimeouts.recover();
  await mcp.start();
  const mcpProblems = checkMcpToolEntries(registry.list(), mcp);
  for (const problem of [...mcpProblems.errors, ...mcpProblems.warnings]) server.log.warn(problem);
  // Fail early and visibly on tool lists that cannot be resolved (the same check as `cairn agents validate`).
  for (const problem of await checkAgentTools(registry.list(), (agent) => tools.forAgent(agent)))
    server.log.warn(formatProblem(problem));
  if (options.daemons !== false) await daemons.start();
  recordsPruner.start();

  return {
    settings,
    server,
    sessions,
    engine,
    chats,
    store,
    agents: registry,
    events,
    sessionLock,
    instanceId,
    agentProblems: problems,
    tasks,
    daemons,
    mcp,
    async close() {
      agentReloader.close();
      approvalTimeouts.close();
      await daemons.stop();
      await server.close();
      await tasks.drain();
      await engine.drain();
      await recordsPruner.stop();
      // After the turns: a running turn may still be calling an MCP tool.
      await mcp.close();
      if (shared) {
        await shared.feed.close();
        await shared.lock.close();
        await shared.heartbeat.stop();
      }
      // The titles and records of the last turns, before the database goes.
      await recorder.flush();
      await tracing.shutdown();
      await store.close();
    },
  };
}
