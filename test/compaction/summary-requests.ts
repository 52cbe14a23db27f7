/** Shared by the compaction tests: telling the summariser's calls from the agent's. */
import type { FakeLlmServer, RecordedRequest } from '../fakes/llm-server.js';

/** Summary calls are the ones whose system prompt is the summariser's. */
export function isSummaryRequest(body: {
  messages?: { role: string; content: unknown }[];
}): boolean {
  const first = body.messages?.[0];
  return first?.role === 'system' && String(first.content).includes('rolling summary');
}

/** The summariser's requests the fake received, in order. */
export function summaryRequestsOf(fake: FakeLlmServer): RecordedRequest[] {
  return fake.requests.filter((r) => isSummaryRequest(r.body));
}

/** The agent's own (non-summary) requests the fake received, in order. */
export function agentRequestsOf(fake: FakeLlmServer): RecordedRequest[] {
  return fake.requests.filter((r) => !isSummaryRequest(r.body));
}
