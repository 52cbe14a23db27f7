/** The shapes the console reads from the HTTP API, as stored (snake_case). */

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface Message {
  seq: number;
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  tool_calls?: ToolCall[] | null;
  tool_call_id?: string | null;
  name?: string | null;
  created_at?: string;
  compacted: boolean;
}

export interface Session {
  id: string;
  agent_name: string;
  mode: string;
  status: 'active' | 'closed';
  title: string | null;
  created_at: string;
  updated_at: string;
  message_count: number;
  compact_summary: string | null;
  compact_size: number;
  compaction_count: number;
  compact_seq: number;
  /** What the session's model calls cost (older servers do not send it). */
  cost?: number;
  /** In `GET /sessions` only: the start of the first user message, or null (older servers: absent). */
  first_user_message?: string | null;
}

/** A detail of the folded messages that a compaction's summary does not contain. */
export interface DroppedItem {
  text: string;
  kind: 'identifier' | 'number' | 'date' | 'quote' | 'name';
  seq: number;
}

export interface Compaction {
  id: number;
  from_size: number;
  to_size: number;
  summary: string;
  trigger: 'manual' | 'auto' | 'background';
  model: string;
  created_at: string;
  undone_at: string | null;
  /** What the summary dropped; null for compactions made before it was recorded (or an older server). */
  dropped?: DroppedItem[] | null;
}

export interface ContextTokens {
  system: number;
  /** Memory notes; older servers do not send it (counted in `system` then). */
  memory?: number;
  summary: number;
  raw: number;
  /** The recalled block the newest user message gets; older servers do not send it. */
  recall?: number;
  total: number;
}

export interface ContextInfo {
  tokens: ContextTokens;
  contextWindow: number;
}

export interface Task {
  id: string;
  session_id: string;
  agent_name: string;
  status: 'running' | 'waiting' | 'completed' | 'failed' | 'cancelled' | 'interrupted';
  input: string;
  result: string | null;
  question: string | null;
  error: string | null;
  /** Set while the task waits for a person to approve this tool call (with its arguments). */
  pending_tool?: string | null;
  pending_arguments?: string | null;
  created_at: string;
  updated_at: string;
}

/** The model an agent calls, as the server resolves it (older servers do not send it). */
export interface ResolvedModel {
  provider: string;
  model: string;
  contextWindow: number;
}

/** An agent as `GET /agents` returns it: agent.json with its defaults, plus `resolvedModel`. */
export interface Agent {
  name: string;
  description?: string;
  system?: string;
  /** The agent's own model name, when agent.json sets one. */
  model?: string;
  resolvedModel?: ResolvedModel;
  tools?: string[];
  toolsNeedingApproval?: string[];
  /** `mcp:` entries whose server is not connected yet (or failing); absent when all are ready. */
  toolsNotReady?: { tool: string; status: string; error?: string }[];
  /** Tool spec → how long a call waits for approval ("30m"). */
  approvalTimeouts?: Record<string, string>;
  maxIterations?: number;
  limits?: { maxTurnTokens?: number; maxSessionTokens?: number; maxToolCalls?: number };
  temperature?: number;
  autoTitle?: boolean;
  memory?: { enabled: boolean; maxChars: number; write?: boolean };
  defaultCompaction?: {
    compactionCount: number;
    /** Percent of the context window that triggers a compaction; 0: only when asked. */
    autoThreshold?: number;
    maxSummaryChars?: number;
    summaryFormat?: 'sections' | 'prose';
    recall?: { enabled: boolean; maxMessages: number; maxTokens: number; minScore?: number };
  };
  /** Set for a daemon agent: its schedule and the prompt each tick runs. */
  daemon?: { every?: string; cron?: string; prompt: string };
}

export interface MemoryNote {
  key: string;
  content: string;
  updated_at: string;
}

export interface DryRun {
  dryRun: true;
  compactedCount: number;
  newSize: number;
  batchChars: number;
  totalChars: number;
}

export interface ClientKey {
  id: string;
  name: string;
  agents: '*' | string[];
  limits: { requestsPerMinute?: number; tokensPerDay?: number };
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  /** What the key's sessions cost, summed (0 without pricing). */
  cost: number;
  /** Tokens the key's sessions spent this UTC day. */
  tokens_today: number;
}
