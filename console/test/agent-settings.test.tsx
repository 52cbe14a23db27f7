/** The agent page's settings panel: the model and each setting in words, no raw JSON. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { agentSettingRows, modelText } from '../src/lib/agent-settings';
import type { Agent } from '../src/lib/types';
import { AgentSettings } from '../src/views/AgentsView';

/** An agent as `GET /agents/guarded` returns it (agent.json with defaults, plus resolvedModel). */
const GUARDED: Agent = {
  name: 'guarded',
  description: 'Asks before it acts',
  system: 'You tell the time, with permission.',
  model: 'bigger-model',
  tools: ['current_time', 'history_search'],
  toolsNeedingApproval: ['current_time'],
  approvalTimeouts: { current_time: '30m' },
  maxIterations: 4,
  autoTitle: true,
  memory: { enabled: false, maxChars: 4000, write: true },
  defaultCompaction: {
    compactionCount: 50,
    maxSummaryChars: 12000,
    summaryFormat: 'sections',
    recall: { enabled: true, maxMessages: 6, maxTokens: 1200, minScore: 0.5 },
  },
  resolvedModel: { provider: 'openai', model: 'bigger-model', contextWindow: 128000 },
};

const value = (agent: Agent, label: string) =>
  agentSettingRows(agent).find((row) => row.label === label)?.value;

describe('agentSettingRows', () => {
  it('starts with the model and its provider as the server resolved them, then the window', () => {
    const rows = agentSettingRows(GUARDED);
    expect(rows[0]).toEqual({ label: 'Model', value: 'bigger-model (openai)' });
    expect(rows[1]).toEqual({ label: 'Context window', value: '128,000 tokens' });
  });

  it('folds the derived approval fields into the tools line', () => {
    expect(value(GUARDED, 'Tools')).toBe(
      'current_time (needs approval, denied after 30m), history_search',
    );
    const labels = agentSettingRows(GUARDED).map((r) => r.label);
    expect(labels).not.toContain('toolsNeedingApproval');
    expect(labels).not.toContain('approvalTimeouts');
  });

  it('marks the MCP entries whose server is not ready yet', () => {
    const agent: Agent = {
      ...GUARDED,
      tools: ['current_time', 'mcp:files', 'mcp:remote/search'],
      toolsNotReady: [
        { tool: 'mcp:files', status: 'connecting' },
        { tool: 'mcp:remote/search', status: 'error', error: 'fetch failed' },
      ],
    };
    expect(value(agent, 'Tools')).toBe(
      'current_time (needs approval, denied after 30m), mcp:files (not ready: its MCP server is still connecting), mcp:remote/search (not ready: its MCP server is unavailable, retrying)',
    );
  });

  it('says each setting in words, defaults included', () => {
    expect(value(GUARDED, 'Model calls a turn')).toBe('at most 4');
    expect(value(GUARDED, 'Temperature')).toBe("the provider's default");
    expect(value(GUARDED, 'Limits')).toBe('none');
    expect(value(GUARDED, 'Memory')).toBe('off: notes are kept, but the model is not given them');
    expect(value(GUARDED, 'Compaction')).toBe(
      '50% of the raw history per compaction, only when asked; summary up to 12,000 characters (sections)',
    );
    expect(value(GUARDED, 'Recall')).toBe('on: up to 6 compacted messages (1,200 tokens) a call');
    expect(value(GUARDED, 'Titles')).toBe('written after the first exchange');
    expect(value(GUARDED, 'Daemon')).toBeUndefined();
  });

  it('reads limits, memory, automatic compaction and a schedule', () => {
    const busy: Agent = {
      ...GUARDED,
      temperature: 0.2,
      limits: { maxTurnTokens: 20000, maxToolCalls: 8 },
      memory: { enabled: true, maxChars: 4000, write: false },
      defaultCompaction: { compactionCount: 30, autoThreshold: 80 },
      daemon: { every: '1h', prompt: 'Report the hour.' },
    };
    expect(value(busy, 'Temperature')).toBe('0.2');
    expect(value(busy, 'Limits')).toBe('20,000 tokens a turn, 8 tool calls a turn');
    expect(value(busy, 'Memory')).toBe('on: up to 4,000 characters of notes, read-only');
    expect(value(busy, 'Compaction')).toBe(
      '30% of the raw history per compaction, automatically at 80% of the context window',
    );
    expect(value(busy, 'Recall')).toBe('off');
    expect(value(busy, 'Daemon')).toBe('every 1h: Report the hour.');
  });

  it('reads autoThreshold 0 as compaction only when asked', () => {
    const manual: Agent = {
      ...GUARDED,
      defaultCompaction: { compactionCount: 30, autoThreshold: 0 },
    };
    expect(value(manual, 'Compaction')).toBe(
      '30% of the raw history per compaction, only when asked',
    );
  });

  it('names the built-in offline model once, not as its own provider', () => {
    const offline: Agent = {
      ...GUARDED,
      resolvedModel: { provider: 'offline', model: 'offline', contextWindow: 128000 },
    };
    expect(modelText(offline)).toBe('the built-in offline model (no network)');
    expect(modelText(offline)).not.toContain('offline (offline)');
  });

  it('says notes of an agent with memory off are searchable when it has the memory tool', () => {
    expect(value({ ...GUARDED, tools: ['memory'] }, 'Memory')).toBe(
      'off: notes are not put in the context; the model can search them with the memory tool',
    );
  });

  it("falls back to the agent's own model name on a server that does not resolve it", () => {
    const { resolvedModel: _r, ...older } = GUARDED;
    expect(modelText(older)).toBe('bigger-model');
    expect(modelText({ name: 'plain' })).toBe("the server's main model");
    expect(agentSettingRows(older).map((r) => r.label)).not.toContain('Context window');
  });
});

describe('<AgentSettings>', () => {
  it('is a list of labelled lines, the system prompt folded, no JSON', () => {
    const html = renderToString(<AgentSettings agent={GUARDED} />);
    expect(html).toContain('<dt>Model</dt><dd>bigger-model (openai)</dd>');
    expect(html).toContain('<summary>System prompt</summary>');
    expect(html).toContain('You tell the time, with permission.');
    expect(html).not.toContain('{');
    expect(html).not.toContain('toolsNeedingApproval');
    expect(html).not.toContain('resolvedModel');
  });
});
