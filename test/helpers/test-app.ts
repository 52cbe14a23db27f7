/**
 * Test harness: a real Cairn app over a real SQLite file in a temp folder
 * (or a fresh Postgres database with `database: 'postgres'`), talking to the
 * scripted fake OpenAI server over loopback.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startApp, type AppOptions, type CairnApp } from '../../src/app.js';
import { loadSettings } from '../../src/config/settings.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createTestDatabase } from './postgres.js';

export const TEST_AGENT = {
  name: 'assistant',
  description: 'Test agent',
  system: 'You are a test assistant.',
  tools: ['current_time', 'history_search'],
  maxIterations: 6,
};

export interface TestAppOptions {
  /** agents/<name>/agent.json contents; default: one `assistant` agent. */
  agents?: Record<string, Record<string, unknown>>;
  /** Extra files inside the home folder (path → content), e.g. tool modules. */
  files?: Record<string, string>;
  /** Merged into cairn.json's models.main (baseURL points at the fake by default). */
  mainModel?: Record<string, unknown>;
  compactModel?: Record<string, unknown>;
  /** cairn.json's models.embed, merged over one that points at the fake's `/v1/embeddings`. */
  embedModel?: Record<string, unknown>;
  /** Extra cairn.json `server` settings. */
  server?: Record<string, unknown>;
  env?: Record<string, string>;
  /** cairn.json's `mcpServers`. */
  mcpServers?: Record<string, unknown>;
  /** Use this fake instead of starting one; pass `null` for the offline model. */
  fake?: FakeLlmServer | null;
  fakeOptions?: Parameters<typeof startFakeLlmServer>[0];
  app?: AppOptions;
  /** The store: a SQLite file in the home folder (default), or a fresh Postgres database dropped on close. */
  database?: DatabaseKind;
  /** Extra cairn.json `database` settings (e.g. `poolSize`). */
  databaseSettings?: Record<string, unknown>;
  /** Further top-level cairn.json sections (e.g. `records`, `telemetry`). */
  cairnJson?: Record<string, unknown>;
}

export type DatabaseKind = 'sqlite' | 'postgres';

/**
 * A model timeout for tests that never wait for one: a fake's answer can take
 * seconds on a loaded machine (a mutation run beside other work), past the
 * harness's 5 s default, which the tests of timeouts rely on.
 */
export const PATIENT_MS = 60_000;

/** The dialects end-to-end suites run on: `describe.each(DATABASES)`. */
export const DATABASES: readonly DatabaseKind[] = ['sqlite', 'postgres'];

export interface TestApp {
  app: CairnApp;
  home: string;
  fake: FakeLlmServer | null;
  /** Closes the app (and the fake if this harness started it) and deletes the home folder. */
  close(): Promise<void>;
}

export function makeHome(
  options: TestAppOptions,
  baseURL: string | null,
  databaseUrl: string | null = null,
): string {
  const home = mkdtempSync(join(tmpdir(), 'cairn-test-'));
  const agents = options.agents ?? { assistant: TEST_AGENT };
  for (const [name, config] of Object.entries(agents)) {
    mkdirSync(join(home, 'agents', name), { recursive: true });
    writeFileSync(join(home, 'agents', name, 'agent.json'), JSON.stringify(config, null, 2));
  }
  for (const [path, content] of Object.entries(options.files ?? {})) {
    mkdirSync(join(home, path, '..'), { recursive: true });
    writeFileSync(join(home, path), content);
  }
  const main =
    baseURL === null
      ? { ...(options.mainModel ?? {}) }
      : {
          baseURL,
          model: 'test-model',
          maxRetries: 0,
          timeoutMs: 5_000,
          ...(options.mainModel ?? {}),
        };
  writeFileSync(
    join(home, 'cairn.json'),
    JSON.stringify({
      server: { port: 0, ...(options.server ?? {}) },
      models: {
        main,
        ...(options.compactModel ? { compact: options.compactModel } : {}),
        ...(options.embedModel
          ? {
              embed: {
                ...(baseURL !== null ? { baseURL, model: 'fake-embed', timeoutMs: 5_000 } : {}),
                ...options.embedModel,
              },
            }
          : {}),
      },
      ...(options.mcpServers ? { mcpServers: options.mcpServers } : {}),
      ...(options.cairnJson ?? {}),
      ...(databaseUrl !== null || options.databaseSettings
        ? {
            database: {
              ...(databaseUrl !== null ? { url: databaseUrl } : {}),
              ...(options.databaseSettings ?? {}),
            },
          }
        : {}),
    }),
  );
  return home;
}

export async function startTestApp(options: TestAppOptions = {}): Promise<TestApp> {
  const ownsFake = options.fake === undefined;
  const fake =
    options.fake === undefined ? await startFakeLlmServer(options.fakeOptions) : options.fake;
  const database = options.database === 'postgres' ? await createTestDatabase() : null;
  const home = makeHome(options, fake ? fake.baseURL : null, database?.url ?? null);
  const settings = loadSettings({ home, env: options.env ?? {} });
  const app = await startApp(settings, { logger: false, daemons: false, ...(options.app ?? {}) });
  // Servers connect in the background; the tests that use them start once they have answered.
  if (options.mcpServers) await app.mcpSettled();
  return {
    app,
    home,
    fake,
    async close() {
      await app.close();
      if (ownsFake && fake) await fake.close();
      await database?.drop();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

/** A new session (POST /sessions with `body`) holding `messages` after its system prompt. */
export async function seedSession(
  app: CairnApp,
  messages: ChatMessage[],
  body: Record<string, unknown> = { agentName: 'assistant' },
): Promise<string> {
  const res = await app.server.inject({ method: 'POST', url: '/sessions', payload: body });
  if (res.statusCode !== 201) throw new Error(`seedSession: HTTP ${res.statusCode} ${res.body}`);
  const id = res.json<{ session: { id: string } }>().session.id;
  await app.store.appendMessages(id, messages);
  return id;
}

/** One chat turn on session `id` through the API. */
export function chatOn(app: CairnApp, id: string, message: string, agentName = 'assistant') {
  return app.server.inject({
    method: 'POST',
    url: `/agents/${agentName}/chat`,
    payload: { message, sessionId: id },
  });
}
