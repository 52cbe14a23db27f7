/**
 * A model decorator that shows each call to an observer (the compaction
 * eval reads the exact requests the model got). The observer sees the
 * request as the model client received it and the response, or the error.
 */
import {
  decorateModel,
  type ModelClient,
  type ModelRequest,
  type ModelResponse,
} from './model-client.js';

export type ModelRole = 'main' | 'compact' | 'title';

export interface ObservedCall {
  role: ModelRole;
  request: ModelRequest;
  response?: ModelResponse;
  error?: unknown;
}

export type ModelCallObserver = (call: ObservedCall) => void;

export function observeModel(
  role: ModelRole,
  inner: ModelClient,
  observe: ModelCallObserver,
): ModelClient {
  return decorateModel(inner, async (request, options) => {
    try {
      const response = await inner.complete(request, options);
      observe({ role, request, response });
      return response;
    } catch (error) {
      observe({ role, request, error });
      throw error;
    }
  });
}
