/**
 * GET /health, GET /agents, GET /agents/:name and the unknown-route 404:
 * documented shapes, no filesystem paths in agent views, and the error
 * envelope for bad and unknown names.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VERSION } from '../../src/version.js';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

const HELPER_AGENT = {
  name: 'helper',
  description: 'Second test agent',
  system: 'You help.',
  tools: [],
  maxIterations: 3,
  temperature: 0.5,
  defaultCompaction: { compactionCount: 30, autoThreshold: 80 },
};

describe('health and agents routes', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: { assistant: TEST_AGENT, helper: HELPER_AGENT } });
  });
  afterAll(async () => t.close());

  it('GET /health reports status, version, database kind and the instance id', async () => {
    const res = await t.app.server.inject({ url: '/health' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.json()).toEqual({
      status: 'ok',
      version: VERSION,
      database: 'sqlite',
      databaseReachable: true,
      instance: t.app.instanceId,
    });
    expect(t.app.instanceId).toMatch(/^inst_/);
  });

  it('GET /health on a Postgres store reports database "postgres"', async () => {
    const pg = await startTestApp({ database: 'postgres', fake: null });
    try {
      const res = await pg.app.server.inject({ url: '/health' });
      expect(res.json()).toMatchObject({ database: 'postgres', instance: pg.app.instanceId });
      expect(pg.app.instanceId).not.toBe(t.app.instanceId);
    } finally {
      await pg.close();
    }
  });

  it('GET /agents lists every loaded agent sorted by name, with defaults and no paths', async () => {
    const res = await t.app.server.inject({ url: '/agents' });
    expect(res.statusCode).toBe(200);
    const { agents } = res.json();
    expect(agents.map((a: { name: string }) => a.name)).toEqual(['assistant', 'helper']);
    const [assistant, helper] = agents;
    expect(assistant).toMatchObject({
      name: 'assistant',
      description: TEST_AGENT.description,
      system: TEST_AGENT.system,
      tools: TEST_AGENT.tools,
      maxIterations: TEST_AGENT.maxIterations,
      defaultCompaction: { compactionCount: 50 },
    });
    expect(helper).toMatchObject({
      name: 'helper',
      temperature: 0.5,
      defaultCompaction: { compactionCount: 30, autoThreshold: 80 },
    });
    for (const agent of agents) expect(agent).not.toHaveProperty('dir');
    // No absolute path of the server's filesystem anywhere in the listing.
    expect(res.body).not.toContain(t.home);
  });

  it('GET /agents/:name returns one agent in the same view', async () => {
    const res = await t.app.server.inject({ url: '/agents/helper' });
    expect(res.statusCode).toBe(200);
    const list = (await t.app.server.inject({ url: '/agents' })).json().agents;
    expect(res.json()).toEqual({ agent: list[1] });
    expect(res.body).not.toContain(t.home);
  });

  it('GET /agents/:name for an unknown agent is 404 AGENT_NOT_FOUND', async () => {
    const res = await t.app.server.inject({ url: '/agents/ghost' });
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({
      error: { code: 'AGENT_NOT_FOUND', message: expect.stringContaining('ghost') },
    });
  });

  it.each([
    ['upper case', 'Assistant'],
    ['a dot', 'my.agent'],
    ['a leading dash', '-agent'],
    ['65 characters', 'a'.repeat(65)],
    ['a space', 'my%20agent'],
  ])('GET /agents/:name with %s is 400 VALIDATION_ERROR', async (_label, name) => {
    const res = await t.app.server.inject({ url: `/agents/${name}` });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('VALIDATION_ERROR');
    expect(typeof res.json().error.message).toBe('string');
  });

  it('an unknown route is 404 NOT_FOUND in the error envelope', async () => {
    for (const [method, url] of [
      ['GET', '/nope'],
      ['POST', '/agents'],
      ['PUT', '/sessions'],
      ['GET', '/agents/assistant/unknown'],
    ] as const) {
      const res = await t.app.server.inject({ method, url });
      expect(res.statusCode, `${method} ${url}`).toBe(404);
      expect(res.json()).toEqual({
        error: { code: 'NOT_FOUND', message: expect.stringContaining(url) },
      });
    }
  });
});
