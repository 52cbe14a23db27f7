/**
 * An agent's settings as the agent page shows them: one labelled line per
 * setting, in words, from the fields `GET /agents` returns. Fields the server
 * derives for itself (which tools need approval, their timeouts) are folded
 * into the line they belong to rather than shown raw.
 */
import type { Agent } from './types';

export interface SettingRow {
  label: string;
  value: string;
}

const number = (n: number): string => n.toLocaleString('en-US');

/** `gpt-4o-mini (openai)`, or what an older server lets us say. */
export function modelText(agent: Agent): string {
  const resolved = agent.resolvedModel;
  // The offline model is its own provider: "offline (offline)" says nothing.
  if (resolved?.provider === 'offline') return 'the built-in offline model (no network)';
  if (resolved) return `${resolved.model} (${resolved.provider})`;
  return agent.model ?? "the server's main model";
}

function toolsText(agent: Agent): string {
  const tools = agent.tools ?? [];
  if (tools.length === 0) return 'none';
  const guarded = new Set(agent.toolsNeedingApproval ?? []);
  const notReady = new Map((agent.toolsNotReady ?? []).map((entry) => [entry.tool, entry]));
  return tools
    .map((tool) => {
      const notes: string[] = [];
      if (guarded.has(tool)) {
        const timeout = agent.approvalTimeouts?.[tool];
        notes.push(timeout ? `needs approval, denied after ${timeout}` : 'needs approval');
      }
      const waiting = notReady.get(tool);
      if (waiting)
        notes.push(
          waiting.status === 'connecting'
            ? 'not ready: its MCP server is still connecting'
            : 'not ready: its MCP server is unavailable, retrying',
        );
      return notes.length > 0 ? `${tool} (${notes.join('; ')})` : tool;
    })
    .join(', ');
}

function limitsText(limits: Agent['limits']): string {
  const parts = [
    limits?.maxTurnTokens !== undefined ? `${number(limits.maxTurnTokens)} tokens a turn` : '',
    limits?.maxSessionTokens !== undefined
      ? `${number(limits.maxSessionTokens)} tokens a session`
      : '',
    limits?.maxToolCalls !== undefined ? `${number(limits.maxToolCalls)} tool calls a turn` : '',
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(', ') : 'none';
}

/** Whether the agent has the memory tool, with which the model searches notes itself. */
export function hasMemoryTool(agent: Agent): boolean {
  return (agent.tools ?? []).includes('memory');
}

function memoryText(agent: Agent): string {
  const memory = agent.memory;
  // Off means the notes are not put in the context; they are still kept (and listed on the page).
  if (!memory?.enabled)
    return hasMemoryTool(agent)
      ? 'off: notes are not put in the context; the model can search them with the memory tool'
      : 'off: notes are kept, but the model is not given them';
  const write = memory.write === false ? 'read-only' : 'the model saves and deletes notes';
  return `on: up to ${number(memory.maxChars)} characters of notes, ${write}`;
}

function compactionText(c: NonNullable<Agent['defaultCompaction']>): string {
  // 0 is off; a server from before automatic compaction was on by default sends no value (off).
  const auto =
    c.autoThreshold !== undefined && c.autoThreshold > 0
      ? `automatically at ${c.autoThreshold}% of the context window`
      : 'only when asked';
  const summary =
    c.maxSummaryChars !== undefined
      ? `; summary up to ${number(c.maxSummaryChars)} characters${c.summaryFormat ? ` (${c.summaryFormat})` : ''}`
      : '';
  return `${c.compactionCount}% of the raw history per compaction, ${auto}${summary}`;
}

function recallText(recall: NonNullable<Agent['defaultCompaction']>['recall']): string {
  if (!recall?.enabled) return 'off';
  return `on: up to ${recall.maxMessages} compacted messages (${number(recall.maxTokens)} tokens) a call`;
}

/** The rows of the settings panel, in the order a reader wants them. */
export function agentSettingRows(agent: Agent): SettingRow[] {
  const rows: SettingRow[] = [{ label: 'Model', value: modelText(agent) }];
  if (agent.resolvedModel)
    rows.push({
      label: 'Context window',
      value: `${number(agent.resolvedModel.contextWindow)} tokens`,
    });
  rows.push({ label: 'Tools', value: toolsText(agent) });
  if (agent.maxIterations !== undefined)
    rows.push({ label: 'Model calls a turn', value: `at most ${agent.maxIterations}` });
  rows.push({
    label: 'Temperature',
    value: agent.temperature !== undefined ? String(agent.temperature) : "the provider's default",
  });
  rows.push({ label: 'Limits', value: limitsText(agent.limits) });
  rows.push({ label: 'Memory', value: memoryText(agent) });
  if (agent.defaultCompaction) {
    rows.push({ label: 'Compaction', value: compactionText(agent.defaultCompaction) });
    rows.push({ label: 'Recall', value: recallText(agent.defaultCompaction.recall) });
  }
  if (agent.autoTitle !== undefined)
    rows.push({
      label: 'Titles',
      value: agent.autoTitle ? 'written after the first exchange' : 'off',
    });
  if (agent.daemon) {
    const schedule = agent.daemon.every
      ? `every ${agent.daemon.every}`
      : `cron ${agent.daemon.cron}`;
    rows.push({ label: 'Daemon', value: `${schedule}: ${agent.daemon.prompt}` });
  }
  return rows;
}
