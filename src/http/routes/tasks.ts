/** Tasks over HTTP: start, read, list, resume with an answer, approve or deny a tool call, cancel. */
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { TaskRunner } from '../../runtime/task-runner.js';
import type { TaskStatus, TaskStore } from '../../store/store.js';
import {
  agentParams,
  AGENT_NAME,
  CURSOR,
  LIMIT,
  objectSchema,
  SESSION_ID,
  taskParams,
  USER_TEXT,
} from '../schemas.js';
import { takeTurnShare } from '../ownership.js';
import { auditBy, ownerOf, principalOf } from '../principal.js';
import { taskResource } from '../task-resource.js';

const waitQuery = objectSchema({ wait: { type: 'boolean', default: false } });

export interface TaskRoutesOptions {
  tasks: TaskRunner;
  store: Pick<TaskStore, 'listTasks'>;
}

export const taskRoutes: FastifyPluginAsync<TaskRoutesOptions> = async (app, deps) => {
  const { tasks } = deps;
  type WithId = { Params: { id: string } };

  /**
   * A task's turn runs on after a 201 without ?wait: the key's maxTurns share
   * the request took is held until the turn stops (done, failed, or waiting
   * for a person), not released with the response.
   */
  function holdShareWhileRunning(request: FastifyRequest, taskId: string): void {
    const release = takeTurnShare(request);
    if (release) void tasks.wait(taskId).then(release, release);
  }

  app.post<{
    Params: { name: string };
    Body: { input: string; sessionId?: string };
    Querystring: { wait: boolean };
  }>(
    '/agents/:name/tasks',
    {
      schema: {
        params: agentParams,
        querystring: waitQuery,
        body: objectSchema({ input: USER_TEXT, sessionId: SESSION_ID }, ['input']),
      },
    },
    async (request, reply) => {
      const { input, sessionId } = request.body;
      let task = await tasks.runTask({
        agentName: request.params.name,
        input,
        ...(sessionId ? { sessionId } : {}),
        owner: ownerOf(principalOf(request)),
      });
      holdShareWhileRunning(request, task.id);
      if (request.query.wait) task = await tasks.wait(task.id);
      return reply.code(201).send({ task: taskResource(task) });
    },
  );

  app.get<WithId>('/tasks/:id', { schema: { params: taskParams } }, async (request) => ({
    task: taskResource(await tasks.getTask(request.params.id)),
  }));

  app.get<{
    Querystring: { status?: TaskStatus; agentName?: string; limit: number; cursor?: string };
  }>(
    '/tasks',
    {
      schema: {
        querystring: objectSchema({
          status: {
            type: 'string',
            enum: ['running', 'waiting', 'completed', 'failed', 'cancelled', 'interrupted'],
          },
          agentName: AGENT_NAME,
          limit: LIMIT,
          cursor: CURSOR,
        }),
      },
    },
    async (request) => {
      const principal = principalOf(request);
      const page = await deps.store.listTasks({
        ...request.query,
        ...(principal.kind === 'client' ? { ownerKey: principal.key.id } : {}),
      });
      return { tasks: page.items.map(taskResource), nextCursor: page.nextCursor };
    },
  );

  app.post<WithId & { Body: { answer?: string } | undefined; Querystring: { wait: boolean } }>(
    '/tasks/:id/resume',
    {
      schema: {
        params: taskParams,
        querystring: waitQuery,
        body: { anyOf: [{ type: 'null' }, objectSchema({ answer: USER_TEXT })] },
      },
    },
    async (request) => {
      const answer = request.body?.answer;
      let task = await tasks.resumeTask({
        taskId: request.params.id,
        ...(answer !== undefined ? { answer } : {}),
      });
      holdShareWhileRunning(request, task.id);
      if (request.query.wait) task = await tasks.wait(task.id);
      return { task: taskResource(task) };
    },
  );

  for (const decision of ['approve', 'deny'] as const) {
    app.post<WithId & { Body: { reason?: string } | undefined; Querystring: { wait: boolean } }>(
      `/tasks/:id/${decision}`,
      {
        schema: {
          params: taskParams,
          querystring: waitQuery,
          body: {
            anyOf: [
              { type: 'null' },
              decision === 'deny' ? objectSchema({ reason: USER_TEXT }) : objectSchema({}),
            ],
          },
        },
      },
      async (request) => {
        const reason = request.body?.reason;
        let task = await tasks.decideApproval({
          taskId: request.params.id,
          decision,
          ...(reason !== undefined ? { reason } : {}),
          by: auditBy(principalOf(request)),
        });
        holdShareWhileRunning(request, task.id);
        if (request.query.wait) task = await tasks.wait(task.id);
        return { task: taskResource(task) };
      },
    );
  }

  app.post<WithId>('/tasks/:id/cancel', { schema: { params: taskParams } }, async (request) => ({
    task: taskResource(await tasks.cancelTask(request.params.id)),
  }));
};
