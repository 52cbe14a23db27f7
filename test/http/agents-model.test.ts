/**
 * `resolvedModel` on GET /agents and GET /agents/:name: the model an agent's
 * conversations call (the main role, renamed by the agent's `model`), never
 * the role's URL or key; the response schema keeps every configuration field;
 * the OpenAPI document describes it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const RENAMED = {
  name: 'renamed',
  description: 'Calls another model on the same endpoint',
  system: 'You are renamed.',
  model: 'bigger-model',
  tools: [{ tool: 'current_time', approval: 'required' }],
  temperature: 0.2,
  maxIterations: 3,
};

interface AgentView {
  name: string;
  model?: string;
  tools: string[];
  toolsNeedingApproval: string[];
  temperature?: number;
  maxIterations: number;
  defaultCompaction: { compactCount: number; compactionCount: number };
  resolvedModel: { provider: string; model: string; contextWindow: number };
}

describe('the model of an agent over HTTP', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      agents: { assistant: TEST_AGENT, renamed: RENAMED },
      mainModel: { contextWindow: 32_000 },
      env: { OPENAI_API_KEY: 'sk-not-for-the-api' },
    });
  });
  afterAll(async () => t.close());

  it('GET /agents gives each agent the main role, renamed by its own `model`', async () => {
    const res = await t.app.server.inject({ url: '/agents' });
    expect(res.statusCode).toBe(200);
    const agents = res.json<{ agents: AgentView[] }>().agents;
    const byName = new Map(agents.map((a) => [a.name, a]));
    expect(byName.get('assistant')!.resolvedModel).toEqual({
      provider: 'openai',
      model: 'test-model',
      contextWindow: 32_000,
    });
    expect(byName.get('renamed')!.resolvedModel).toEqual({
      provider: 'openai',
      model: 'bigger-model',
      contextWindow: 32_000,
    });
    // The agent's own field is kept as written.
    expect(byName.get('renamed')!.model).toBe('bigger-model');
    expect(byName.get('assistant')).not.toHaveProperty('model');
  });

  it('keeps every configuration field through the response schema, and no URL, key or path', async () => {
    const res = await t.app.server.inject({ url: '/agents/renamed' });
    expect(res.statusCode).toBe(200);
    const agent = res.json<{ agent: AgentView }>().agent;
    expect(agent).toMatchObject({
      name: 'renamed',
      tools: ['current_time'],
      toolsNeedingApproval: ['current_time'],
      temperature: 0.2,
      maxIterations: 3,
      // The canonical name, and the older spelling for clients that read it.
      defaultCompaction: { compactCount: 50, compactionCount: 50 },
    });
    expect(agent).not.toHaveProperty('dir');
    expect(res.body).not.toContain(t.fake!.baseURL);
    expect(res.body).not.toContain('sk-not-for-the-api');
    expect(res.body).not.toContain('apiKey');
  });

  it('describes resolvedModel in the OpenAPI document', async () => {
    const doc = (await t.app.server.inject({ url: '/openapi.json' })).json<{
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    }>();
    const ok = JSON.stringify(doc.paths['/agents/{name}']!.get!.responses['200']);
    expect(ok).toContain('resolvedModel');
    expect(ok).toContain('contextWindow');
  });
});

describe('the model of an agent on the offline model', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { renamed: RENAMED }, fake: null });
  });
  afterAll(async () => t.close());

  it('is the offline model whatever name the agent asks for', async () => {
    const res = await t.app.server.inject({ url: '/agents/renamed' });
    const { resolvedModel } = res.json<{ agent: AgentView }>().agent;
    expect(resolvedModel.provider).toBe('offline');
    expect(resolvedModel.model).not.toBe('bigger-model');
    expect(resolvedModel.contextWindow).toBeGreaterThan(0);
  });
});
