/**
 * defaultCompaction over HTTP: compact (with dry run and instructions), undo,
 * the history of compactions, and the exact context of the next model call.
 */
import type { FastifyPluginAsync } from 'fastify';
import type { DefaultCompaction } from '../../compaction/default-compaction.js';
import type { BackgroundCompaction } from '../../compaction/background-compaction.js';
import { CairnError } from '../../errors.js';
import type { AgentRegistry } from '../../agents/agent-registry.js';
import type { Sessions } from '../../runtime/sessions.js';
import type { TurnEngine } from '../../runtime/turn-engine.js';
import type { CompactionStore } from '../../store/store.js';
import { accountContext } from '../../runtime/context-accounting.js';
import { objectSchema, sessionParams } from '../schemas.js';

interface CompactBody {
  dryRun?: boolean;
  instructions?: string;
}

export interface CompactionRoutesOptions {
  sessions: Pick<Sessions, 'get'>;
  engine: Pick<TurnEngine, 'buildContext'>;
  agents: Pick<AgentRegistry, 'find'>;
  store: Pick<CompactionStore, 'listCompactions'>;
  compaction: DefaultCompaction;
  /** Summaries prepared off the turn: the context shows the session's pending one. */
  background: Pick<BackgroundCompaction, 'describe'>;
  contextWindow: number;
}

export const compactionRoutes: FastifyPluginAsync<CompactionRoutesOptions> = async (app, deps) => {
  const { sessions, engine, agents, store, compaction } = deps;
  type WithId = { Params: { id: string } };

  app.post<WithId & { Body: CompactBody | undefined }>(
    '/sessions/:id/compact',
    {
      schema: {
        params: sessionParams,
        body: {
          // No body, or an empty one, is a plain compaction (no dry run, no instructions).
          anyOf: [
            { type: 'null' },
            objectSchema({
              dryRun: { type: 'boolean' },
              instructions: { type: 'string', minLength: 1, maxLength: 4000 },
            }),
          ],
        },
      },
    },
    async (request) => {
      const body = request.body ?? {};
      const result = await compaction.run({
        sessionId: (await sessions.get(request.params.id)).id,
        trigger: 'manual',
        ...(body.dryRun ? { dryRun: true } : {}),
        ...(body.instructions !== undefined ? { instructions: body.instructions } : {}),
      });
      if ('dryRun' in result) return result;
      // The response keeps its documented shape; the cost is on the session and compaction row.
      const { input_tokens: _in, output_tokens: _out, ...report } = result;
      return report;
    },
  );

  app.post<WithId>(
    '/sessions/:id/compact/undo',
    { schema: { params: sessionParams } },
    async (request) => compaction.undo(request.params.id),
  );

  app.get<WithId>(
    '/sessions/:id/compactions',
    { schema: { params: sessionParams } },
    async (request) => {
      const session = await sessions.get(request.params.id);
      return { compactions: await store.listCompactions(session.id) };
    },
  );

  app.get<WithId>(
    '/sessions/:id/context',
    { schema: { params: sessionParams } },
    async (request) => {
      const session = await sessions.get(request.params.id);
      const agent = agents.find(session.agent_name);
      if (!agent) {
        throw new CairnError(
          'AGENT_NOT_FOUND',
          `Session "${session.id}" belongs to agent "${session.agent_name}", which is no longer loaded.`,
        );
      }
      return {
        ...accountContext(await engine.buildContext(session, agent)),
        contextWindow: deps.contextWindow,
        preparedSummary: await deps.background.describe(session),
      };
    },
  );
};
