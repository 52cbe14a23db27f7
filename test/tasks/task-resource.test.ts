/**
 * The task resource keeps `pending_arguments` and `decided_by` in their
 * documented text form (JSON text) and carries each one's parsed value beside
 * it: `pending_arguments_parsed`, `decided_by_parsed`, null when there is
 * nothing. On every route that returns a task. A real app, the scripted fake model.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const BOOK_TOOL = `export default {
  name: 'book_hotel',
  description: 'Books a hotel room in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
  async run(args) { return 'Booked ' + args.city; },
};
`;

describe('the task resource', () => {
  let t: TestApp;
  const fake = () => t.fake!;
  beforeAll(async () => {
    t = await startTestApp({
      agents: {
        planner: {
          name: 'planner',
          system: 'You plan trips.',
          tools: [{ tool: './tools/book.js', approval: 'required' }],
          maxIterations: 6,
        },
      },
      files: { 'agents/planner/tools/book.js': BOOK_TOOL },
    });
  });
  afterAll(async () => t.close());
  beforeEach(() => fake().reset());

  const inject = (method: 'GET' | 'POST', url: string, payload?: object) =>
    t.app.server.inject({ method, url, ...(payload ? { payload } : {}) });

  async function waitingTask(args: string): Promise<Record<string, unknown>> {
    fake().script({ tool_calls: [{ name: 'book_hotel', arguments: args }] });
    const res = await inject('POST', '/agents/planner/tasks?wait=true', { input: 'Book Lyon' });
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ task: Record<string, unknown> }>().task;
  }

  it('shows the pending arguments as sent and parsed, then who decided, as stored and parsed', async () => {
    const started = await waitingTask('{"city":"Lyon"}');
    expect(started).toMatchObject({
      status: 'waiting',
      pending_arguments: '{"city":"Lyon"}',
      pending_arguments_parsed: { city: 'Lyon' },
      decided_by: null,
      decided_by_parsed: null,
    });
    const id = String(started['id']);
    expect((await inject('GET', `/tasks/${id}`)).json()).toMatchObject({
      task: { pending_arguments_parsed: { city: 'Lyon' } },
    });
    const listed = (await inject('GET', '/tasks?status=waiting')).json<{
      tasks: Record<string, unknown>[];
    }>().tasks;
    expect(listed.find((task) => task['id'] === id)).toMatchObject({
      pending_arguments_parsed: { city: 'Lyon' },
    });

    fake().script({ content: 'Booked.' });
    const approved = await inject('POST', `/tasks/${id}/approve?wait=true`);
    expect(approved.statusCode, approved.body).toBe(200);
    const task = approved.json<{ task: Record<string, unknown> }>().task;
    expect(task).toMatchObject({
      status: 'completed',
      pending_arguments: null,
      pending_arguments_parsed: null,
      decided_by_parsed: { key: null, user: null },
    });
    expect(JSON.parse(String(task['decided_by']))).toEqual({ key: null, user: null });
  });

  it('a cancelled wait leaves both parsed fields null, on the cancel route too', async () => {
    const task = await waitingTask('{"city":"Annecy"}');
    expect(task).toMatchObject({ pending_arguments_parsed: { city: 'Annecy' } });
    const cancelled = await inject('POST', `/tasks/${String(task['id'])}/cancel`);
    expect(cancelled.statusCode, cancelled.body).toBe(200);
    expect(cancelled.json()).toMatchObject({
      task: {
        status: 'cancelled',
        pending_arguments: null,
        pending_arguments_parsed: null,
        decided_by_parsed: null,
      },
    });
  });
});
