/** What a model call costs by its role's pricing (per million tokens). Pure. */
import type { ModelPricing } from '../config/settings.js';
import type { ModelUsage } from '../llm/model-client.js';

const MILLION = 1_000_000;

/**
 * The cost of one call: uncached prompt tokens at the input price, cached
 * ones at the cached price, completion tokens at the output price. Null when
 * the role has no pricing or the provider reported no usage.
 */
export function callCost(
  usage: ModelUsage | null,
  pricing: ModelPricing | null | undefined,
): number | null {
  if (!usage || !pricing) return null;
  const cached = Math.min(usage.cache_read_tokens ?? 0, usage.prompt_tokens);
  return (
    ((usage.prompt_tokens - cached) * pricing.inputPerMTok +
      cached * pricing.cachedInputPerMTok +
      usage.completion_tokens * pricing.outputPerMTok) /
    MILLION
  );
}
