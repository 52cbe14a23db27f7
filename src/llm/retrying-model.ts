/**
 * The frame both provider adapters share: the role's model and window, and
 * `complete` running one attempt under the one retry layer.
 */
import type { ModelRoleSettings } from '../config/settings.js';
import type { ModelCallOptions, ModelClient, ModelRequest, ModelResponse } from './model-client.js';
import {
  abortableSleep,
  callWithRetries,
  classifyFailure,
  type ModelLogger,
  type ProviderFailures,
} from './retry-policy.js';

export interface RetryingModelOptions {
  role: ModelRoleSettings;
  logger?: ModelLogger;
  /** Injected in tests to avoid real waiting; defaults to a timer. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/**
 * A provider adapter's frame: the role's model and window, and `complete`
 * running one attempt (streamed when the caller takes deltas) under the retry
 * layer, with the failures classified by the adapter's `failures()`.
 */
export abstract class RetryingModel<E extends Error> implements ModelClient {
  readonly model: string;
  readonly contextWindow: number;
  protected readonly role: ModelRoleSettings;
  private readonly logger: ModelLogger | undefined;
  private readonly sleep: (ms: number, signal?: AbortSignal) => Promise<void>;

  constructor(options: RetryingModelOptions) {
    this.role = options.role;
    this.model = options.role.model;
    this.contextWindow = options.role.contextWindow;
    this.logger = options.logger;
    this.sleep = options.sleep ?? abortableSleep;
  }

  complete(request: ModelRequest, options: ModelCallOptions = {}): Promise<ModelResponse> {
    return callWithRetries({
      attempts: this.role.maxRetries + 1,
      attempt: () =>
        options.onDelta
          ? this.streamOnce(request, options.onDelta, options)
          : this.completeOnce(request, options),
      classify: (err) => classifyFailure(err, this.failures()),
      sleep: this.sleep,
      signal: options.signal,
      logger: this.logger,
    });
  }

  protected abstract completeOnce(
    request: ModelRequest,
    options: ModelCallOptions,
  ): Promise<ModelResponse>;

  protected abstract streamOnce(
    request: ModelRequest,
    onDelta: (text: string) => void,
    options: ModelCallOptions,
  ): Promise<ModelResponse>;

  protected abstract failures(): ProviderFailures<E>;
}
