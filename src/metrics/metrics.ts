/**
 * Prometheus metrics, all prefixed `cairn_`, in a registry of
 * their own (no prom-client global). They are derived from the outside of the
 * core rather than counted inside it: model calls through a ModelClient
 * decorator, lifecycle from the EventBus, chat turns from the HTTP layer, and
 * gauges read when scraped, tool calls from the runtime's TurnObserver.
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { decorateModel, type ModelClient } from '../llm/model-client.js';
import type { EventRow } from '../store/store.js';
import type { RecallDegradedReason } from '../recall/hybrid-recall.js';

export type ModelRole = 'main' | 'compact' | 'title';

/** Seconds; model calls and turns run from milliseconds to minutes. */
const LATENCY_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Label values are cut to this many characters: a long name never makes a huge series. */
export const MAX_LABEL_CHARS = 64;

/**
 * A label value as exported. Values come from closed sets (agents loaded,
 * tools they offer, fixed outcomes); this bounds their length too.
 */
export function labelValue(value: string): string {
  return value.length <= MAX_LABEL_CHARS ? value : value.slice(0, MAX_LABEL_CHARS);
}

/** Read when /metrics is scraped. */
export interface MetricsGauges {
  queueDepth(): number;
  openEventStreams(): number;
}

export class CairnMetrics {
  readonly registry = new Registry();
  private readonly turns: Counter<'agent' | 'mode' | 'outcome'>;
  private readonly turnSeconds: Histogram<'agent' | 'mode'>;
  private readonly modelCalls: Counter<'role' | 'purpose' | 'outcome'>;
  private readonly modelSeconds: Histogram<'role' | 'purpose'>;
  private readonly modelTokens: Counter<'role' | 'direction'>;
  private readonly modelCost: Counter<'role'>;
  private readonly compactions: Counter<'trigger' | 'outcome'>;
  private readonly taskTransitions: Counter<'state'>;
  private readonly daemonTicks: Counter<'agent'>;
  private readonly toolCalls: Counter<'tool' | 'outcome'>;
  private readonly recallDegraded: Counter<'reason'>;
  /** The agent of each task not yet finished (kept while it waits, for its resumed turn). */
  private readonly taskAgents = new Map<string, string>();
  /** When each running task's current turn started. */
  private readonly taskStarted = new Map<string, number>();

  constructor(
    gauges: MetricsGauges,
    private readonly now: () => number = () => performance.now(),
  ) {
    const registers = [this.registry];
    const counter = <L extends string>(name: string, help: string, labelNames: L[]): Counter<L> =>
      new Counter({ name, help, labelNames, registers });
    const histogram = <L extends string>(
      name: string,
      help: string,
      labelNames: L[],
    ): Histogram<L> =>
      new Histogram({ name, help, labelNames, buckets: LATENCY_BUCKETS_S, registers });
    /** A gauge read when scraped. */
    const gauge = (name: string, help: string, read: () => number): void => {
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    };
    this.turns = counter(
      'cairn_turns_total',
      'Turns run (chat requests and task runs), by agent, mode and outcome.',
      ['agent', 'mode', 'outcome'],
    );
    this.turnSeconds = histogram(
      'cairn_turn_duration_seconds',
      'Duration of a turn, by agent and mode.',
      ['agent', 'mode'],
    );
    this.modelCalls = counter(
      'cairn_model_calls_total',
      'Model calls, by role (main, compact), purpose (chat, summary) and outcome.',
      ['role', 'purpose', 'outcome'],
    );
    this.modelSeconds = histogram(
      'cairn_model_call_duration_seconds',
      'Latency of a model call (retries included), by role and purpose.',
      ['role', 'purpose'],
    );
    this.modelTokens = counter(
      'cairn_model_tokens_total',
      'Tokens the provider reported, by role and direction (in = prompt, out = completion).',
      ['role', 'direction'],
    );
    this.modelCost = counter(
      'cairn_model_cost_total',
      "What the model calls cost by the role's pricing (models.<role>.pricing), by role.",
      ['role'],
    );
    this.compactions = counter(
      'cairn_compactions_total',
      'Compactions, by trigger (manual, auto, overflow) and outcome (ok, suspended, undone).',
      ['trigger', 'outcome'],
    );
    this.taskTransitions = counter(
      'cairn_task_transitions_total',
      'Task state changes, by the state entered.',
      ['state'],
    );
    this.daemonTicks = counter('cairn_daemon_ticks_total', 'Daemon ticks run, by agent.', [
      'agent',
    ]);
    this.recallDegraded = counter(
      'cairn_recall_degraded_total',
      'Model calls whose hybrid recall fell back to lexical search, by reason (embed_failed: the embedding provider failed or timed out; embed_paused: it failed a moment ago and is not asked again yet; embed_budget: the tokensPerDay of the session owner key could not cover the embedding of the query).',
      ['reason'],
    );
    this.toolCalls = counter(
      'cairn_tool_calls_total',
      'Tool calls run by the loop, by tool and outcome (ok, error).',
      ['tool', 'outcome'],
    );
    gauge(
      'cairn_queue_depth',
      'Turns, resets and closes running or waiting in the per-session queues.',
      () => gauges.queueDepth(),
    );
    gauge('cairn_event_streams_open', 'Open GET /events streams.', () => gauges.openEventStreams());
    // Memory of this process, so a slow leak shows on a dashboard (and in the soak).
    gauge(
      'cairn_process_heap_used_bytes',
      'V8 heap in use by this process (process.memoryUsage().heapUsed).',
      () => process.memoryUsage().heapUsed,
    );
    gauge('cairn_process_rss_bytes', 'Resident memory of this process (RSS).', () =>
      process.memoryUsage.rss(),
    );
    gauge('cairn_tasks_running', 'Tasks running in this process.', () => this.taskStarted.size);
  }

  /** The metrics text and its content type, for GET /metrics. */
  async scrape(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /** A ModelClient that counts the calls, latency and tokens of `inner` under `role`. */
  instrumentModel(role: ModelRole, inner: ModelClient): ModelClient {
    const { modelCalls, modelTokens, modelCost, modelSeconds, now } = this;
    return decorateModel(inner, async (request, options) => {
      const labels = { role, purpose: request.purpose };
      const started = now();
      try {
        const response = await inner.complete(request, options);
        modelCalls.inc({ ...labels, outcome: 'ok' });
        if (response.usage) {
          modelTokens.inc({ role, direction: 'in' }, response.usage.prompt_tokens);
          modelTokens.inc({ role, direction: 'out' }, response.usage.completion_tokens);
        }
        if (typeof response.cost === 'number') modelCost.inc({ role }, response.cost);
        return response;
      } catch (err) {
        modelCalls.inc({ ...labels, outcome: 'error' });
        throw err;
      } finally {
        modelSeconds.observe(labels, (now() - started) / 1000);
      }
    });
  }

  /** An embedding call (the `embed` role): counted like other model calls, under role `embed`. */
  embeddingCall(
    outcome: 'ok' | 'error',
    tokens: number,
    cost: number | null,
    seconds: number,
  ): void {
    const labels = { role: 'embed', purpose: 'embed' };
    this.modelCalls.inc({ ...labels, outcome });
    this.modelSeconds.observe(labels, seconds);
    if (tokens > 0) this.modelTokens.inc({ role: 'embed', direction: 'in' }, tokens);
    if (cost !== null && cost > 0) this.modelCost.inc({ role: 'embed' }, cost);
  }

  /** A model call whose hybrid recall fell back to lexical search. */
  recallDegradedTo(reason: RecallDegradedReason): void {
    this.recallDegraded.inc({ reason });
  }

  /** A chat turn as the HTTP layer saw it. */
  chatTurn(agent: string, outcome: string, durationMs: number): void {
    this.turns.inc({ agent, mode: 'chat', outcome });
    this.turnSeconds.observe({ agent, mode: 'chat' }, durationMs / 1000);
  }

  /** A tool call the loop ran; `isError` covers failures, timeouts, unknown tools and bad arguments. */
  /** Counts one tool call; `tool` is a name the agent offers (or `unknown`), cut to a label's length. */
  toolCall(tool: string, isError: boolean): void {
    this.toolCalls.inc({ tool: labelValue(tool), outcome: isError ? 'error' : 'ok' });
  }

  /** An EventBus observer: task turns and transitions, compactions, daemon ticks. */
  observeEvent(event: EventRow): void {
    const data = event.data;
    const str = (key: string): string => (typeof data[key] === 'string' ? data[key] : 'unknown');
    if (event.type.startsWith('task.')) {
      const state = event.type.slice('task.'.length);
      this.taskTransitions.inc({ state });
      this.taskTurn(str('taskId'), state, str('agentName'));
    } else if (event.type === 'context.defaultCompacted') {
      this.compactions.inc({ trigger: str('trigger'), outcome: 'ok' });
    } else if (event.type === 'context.compacted') {
      this.compactions.inc({ trigger: 'overflow', outcome: 'ok' });
    } else if (event.type === 'context.compactionSuspended') {
      this.compactions.inc({ trigger: 'auto', outcome: 'suspended' });
    } else if (event.type === 'context.compactionUndone') {
      this.compactions.inc({ trigger: 'manual', outcome: 'undone' });
    } else if (event.type === 'daemon.tick') {
      this.daemonTicks.inc({ agent: str('agentName') });
    }
  }

  /** A task run is a turn from `started`/`resumed` to the next state it stops in. */
  private taskTurn(taskId: string, state: string, agentName: string): void {
    if (state === 'started' || state === 'resumed') {
      if (agentName !== 'unknown') this.taskAgents.set(taskId, agentName);
      this.taskStarted.set(taskId, this.now());
      return;
    }
    const agent = this.taskAgents.get(taskId) ?? 'unknown';
    const startedAt = this.taskStarted.get(taskId);
    this.taskStarted.delete(taskId);
    if (state !== 'waiting') this.taskAgents.delete(taskId);
    if (startedAt === undefined) return;
    this.turns.inc({ agent, mode: 'task', outcome: state });
    this.turnSeconds.observe({ agent, mode: 'task' }, (this.now() - startedAt) / 1000);
  }
}
