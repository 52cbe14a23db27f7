/**
 * A `chat {model}` span around every model call of any `ModelClient`, on the
 * GenAI semantic conventions, the child of the call's scope span (the turn,
 * or a compaction). Message content is added only when the operator opted in.
 */
import { decorateModel, type ModelClient } from '../llm/model-client.js';
import { inSpan, spanOf, type Tracing } from './tracing.js';

export function traceModel(client: ModelClient, tracing: Tracing, provider: string): ModelClient {
  if (!tracing.enabled) return client;
  return decorateModel(client, async (request, options = {}) => {
    const model = request.model ?? client.model;
    const scope = options.scope;
    const span = tracing.startSpan(`chat ${model}`, {
      parent: spanOf(scope?.span),
      kind: 'client',
      attributes: {
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': provider,
        'gen_ai.request.model': model,
        'gen_ai.conversation.id': scope?.sessionId,
        'gen_ai.agent.name': scope?.agentName,
        'gen_ai.conversation.compacted': scope?.compacted?.(),
        'gen_ai.request.temperature': request.temperature,
        'gen_ai.request.max_tokens': request.maxTokens,
        'cairn.call.purpose': request.purpose,
        ...(tracing.captureContent
          ? { 'gen_ai.input.messages': JSON.stringify(request.messages) }
          : {}),
      },
    });
    return inSpan(
      span,
      () => client.complete(request, options),
      (response) => ({
        'gen_ai.response.model': response.model,
        'gen_ai.usage.input_tokens': response.usage?.prompt_tokens,
        'gen_ai.usage.output_tokens': response.usage?.completion_tokens,
        'gen_ai.usage.cache_read.input_tokens': response.usage?.cache_read_tokens,
        'gen_ai.response.finish_reasons': [response.finishReason],
        'cairn.cost': response.cost ?? undefined,
        'cairn.fallback.hops': response.fallbackHops?.length
          ? response.fallbackHops.map((hop) => `${hop.provider}/${hop.model}: ${hop.reason}`)
          : undefined,
        ...(tracing.captureContent
          ? { 'gen_ai.output.messages': JSON.stringify([response.message]) }
          : {}),
      }),
      // A provider SDK's own error text may quote the request: not on the span.
      () => 'The model call failed.',
    );
  });
}
