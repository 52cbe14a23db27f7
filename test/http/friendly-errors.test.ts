/**
 * Error messages that say what to do: blank text, enum values,
 * unknown fields, and AGENT_NOT_FOUND for an agent whose file exists but is
 * invalid, against the real app.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';

describe('validation and not-found messages', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({
      fake: null,
      agents: {
        assistant: TEST_AGENT,
        broken: { ...TEST_AGENT, name: 'broken', maxIterations: 0 },
      },
    });
  });
  afterAll(() => t.close());

  it('a blank message: "message must not be blank"', async () => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: '  \n ' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toEqual({
      error: { code: 'VALIDATION_ERROR', message: 'message must not be blank' },
    });
  });

  it('an enum value lists the allowed values', async () => {
    const res = await t.app.server.inject({ method: 'GET', url: '/sessions?status=open' });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toBe('status must be one of: "active", "closed"');
  });

  it('an unknown field is named', async () => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hi', colour: 'red' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toBe('body has an unknown field "colour"');
  });

  it('a missing field is named', async () => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: {},
    });
    expect(res.json().error.message).toBe('body is missing the required field "message"');
  });

  it('AGENT_NOT_FOUND for an invalid agent file says it is invalid and gives the first problem', async () => {
    const res = await t.app.server.inject({ method: 'GET', url: '/agents/broken' });
    expect(res.statusCode).toBe(404);
    const { code, message } = res.json().error;
    expect(code).toBe('AGENT_NOT_FOUND');
    expect(message).toContain('agents/broken/agent.json is invalid');
    expect(message).toContain('/maxIterations');
    expect(message).not.toContain('Add agents/');
    expect(message).not.toContain(t.home);
  });

  it('AGENT_NOT_FOUND for an agent with no file still says to add it', async () => {
    const res = await t.app.server.inject({ method: 'GET', url: '/agents/nobody' });
    expect(res.statusCode).toBe(404);
    expect(res.json().error.message).toContain('Add agents/nobody/agent.json');
  });
});
