/** Agent memory over HTTP: list or search notes, put one, delete one. */
import type { FastifyPluginAsync } from 'fastify';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import type { MemoryStore } from '../../store/store.js';
import { MEMORY_CONTENT_MAX_CHARS, MEMORY_KEY_PATTERN } from '../../tools/builtins/memory.js';
import { AGENT_NAME, agentParams, objectSchema } from '../schemas.js';

const noteParams = objectSchema(
  { name: AGENT_NAME, key: { type: 'string', pattern: MEMORY_KEY_PATTERN } },
  ['name', 'key'],
);

export interface MemoryRoutesOptions {
  agents: AgentRegistry;
  store: MemoryStore;
}

export const memoryRoutes: FastifyPluginAsync<MemoryRoutesOptions> = async (app, deps) => {
  type NoteParams = { Params: { name: string; key: string } };

  app.get<{ Params: { name: string }; Querystring: { query?: string; limit: number } }>(
    '/agents/:name/memory',
    {
      schema: {
        params: agentParams,
        querystring: objectSchema({
          query: { type: 'string', maxLength: 500 },
          limit: { type: 'integer', minimum: 1, maximum: 500, default: 100 },
        }),
      },
    },
    async (request) => {
      const agent = deps.agents.get(request.params.name);
      const { query, limit } = request.query;
      return { notes: await deps.store.listMemory(agent.name, query, limit) };
    },
  );

  app.put<NoteParams & { Body: { content: string } }>(
    '/agents/:name/memory/:key',
    {
      schema: {
        params: noteParams,
        body: objectSchema(
          { content: { type: 'string', minLength: 1, maxLength: MEMORY_CONTENT_MAX_CHARS } },
          ['content'],
        ),
      },
    },
    async (request) => {
      const agent = deps.agents.get(request.params.name);
      return {
        note: await deps.store.putMemory(agent.name, request.params.key, request.body.content),
      };
    },
  );

  app.delete<NoteParams>(
    '/agents/:name/memory/:key',
    { schema: { params: noteParams } },
    async (request, reply) => {
      const agent = deps.agents.get(request.params.name);
      await deps.store.deleteMemory(agent.name, request.params.key);
      return reply.code(204).send();
    },
  );
};
