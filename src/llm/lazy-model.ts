/**
 * A model whose client loads on its first call. A provider SDK is tens of
 * megabytes resident (Anthropic's with the OpenTelemetry API it pulls in:
 * ~23 MB); a server whose role names that provider but has not called it yet,
 * or only uses it as a fallback, should not carry it from start-up.
 */
import type { ModelCallOptions, ModelClient, ModelRequest, ModelResponse } from './model-client.js';

export function lazyModel(
  model: string,
  contextWindow: number,
  load: () => Promise<ModelClient>,
): ModelClient {
  let loading: Promise<ModelClient> | undefined;
  return {
    model,
    contextWindow,
    async complete(request: ModelRequest, options?: ModelCallOptions): Promise<ModelResponse> {
      // A failed load is tried again on the next call (the module may be installed meanwhile).
      loading ??= load().catch((err: unknown) => {
        loading = undefined;
        throw err;
      });
      return (await loading).complete(request, options);
    },
  };
}
