/** Shared by the compaction tests: telling the summariser's calls from the agent's. */

/** Summary calls are the ones whose system prompt is the summariser's. */
export function isSummaryRequest(body: {
  messages?: { role: string; content: unknown }[];
}): boolean {
  const first = body.messages?.[0];
  return first?.role === 'system' && String(first.content).includes('rolling summary');
}
