/**
 * Cairn as an MCP server, driven by the official SDK client:
 * over Streamable HTTP at POST /mcp (behind the bearer key), and over stdio by
 * running the built `cairn mcp` as a child process. Each agent is a
 * `chat_with_<agent>` tool; the reply carries a session id that continues the
 * conversation; bad arguments and unknown sessions are tool errors.
 */
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { createCairnMcpServer } from '../../src/mcp/cairn-mcp-server.js';
import { makeHome, startTestApp, TEST_AGENT, type TestApp } from '../helpers/test-app.js';
import { CLI_PATH, dbPathOf } from '../process/spawn-server.js';

const API_KEY = 'test-key-for-mcp';
const AGENTS = {
  assistant: TEST_AGENT,
  planner: { name: 'planner', description: 'Makes plans', system: 'You plan.', tools: [] },
};

interface ChatToolResult {
  content: { type: string; text: string }[];
  structuredContent?: { reply: string; sessionId: string };
  isError?: boolean;
}

/** One line `cairn mcp` writes to stdout. */
interface RpcLine {
  jsonrpc: string;
  id: string | number | null;
  error?: { code: number; message: string };
  result?: { serverInfo: { name: string } };
}

interface WireMessage {
  role: string;
  content: string | null;
}

/** The checks both transports must pass. */
function describeChatTools(connect: () => Promise<Client>, fake: () => FakeLlmServer): void {
  let client: Client;
  beforeAll(async () => {
    client = await connect();
  }, 30_000);
  afterAll(async () => client?.close());

  it('lists one chat_with_<agent> tool per agent', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['chat_with_assistant', 'chat_with_planner']);
    const planner = tools[1]!;
    expect(planner.description).toContain('Makes plans');
    expect(planner.inputSchema.required).toEqual(['message']);
  });

  it('chats, and continues the session with its id', async () => {
    fake().script({ content: 'First reply' }, { content: 'Second reply' });
    const first = (await client.callTool({
      name: 'chat_with_planner',
      arguments: { message: 'plan a trip' },
    })) as ChatToolResult;
    expect(first.isError).toBeFalsy();
    expect(first.content[0]!.text).toBe('First reply');
    const sessionId = first.structuredContent!.sessionId;
    expect(first.content[1]!.text).toBe(`sessionId: ${sessionId}`);

    const second = (await client.callTool({
      name: 'chat_with_planner',
      arguments: { message: 'and back', sessionId },
    })) as ChatToolResult;
    expect(second.structuredContent).toEqual({ reply: 'Second reply', sessionId });
    const seen = fake().requests.at(-1)!.body.messages as WireMessage[];
    expect(seen.map((m) => m.content)).toEqual(
      expect.arrayContaining(['plan a trip', 'First reply', 'and back']),
    );
  });

  it('sends progress notifications while the turn runs, when the call carries a progressToken', async () => {
    // The SDK's client handles a notification a microtask after the line that
    // carries it, and forgets the token once the result is in: a notification
    // sent just before the result may be dropped there. So the reply is
    // written twice, and only the first "Writing the reply." is expected.
    fake().script(
      { tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'Let me look again.', tool_calls: [{ name: 'current_time', arguments: '{}' }] },
      { content: 'It is now.' },
    );
    const progress: { progress: number; message?: string }[] = [];
    const result = (await client.callTool(
      { name: 'chat_with_assistant', arguments: { message: 'what time is it?' } },
      undefined,
      { onprogress: (p) => progress.push(p) },
    )) as ChatToolResult;
    expect(result.structuredContent?.reply).toBe('It is now.');
    const messages = progress.map((p) => p.message);
    expect(messages).toEqual(
      expect.arrayContaining([
        'The agent "assistant" is working.',
        'Calling the tool current_time.',
        'The tool current_time finished.',
        'Writing the reply.',
      ]),
    );
    expect(messages.slice(0, 6)).toEqual([
      'The agent "assistant" is working.',
      'Calling the tool current_time.',
      'The tool current_time finished.',
      'Writing the reply.',
      'Calling the tool current_time.',
      'The tool current_time finished.',
    ]);
    // Progress only grows, as MCP requires.
    progress.forEach((p, i) => expect(p.progress).toBe(i + 1));
  });

  it('bad arguments, unknown sessions and unknown tools are tool errors', async () => {
    const empty = (await client.callTool({
      name: 'chat_with_planner',
      arguments: { message: '' },
    })) as ChatToolResult;
    expect(empty.isError).toBe(true);
    expect(empty.content[0]!.text).toContain('"message"');

    const unknownSession = (await client.callTool({
      name: 'chat_with_planner',
      arguments: { message: 'hi', sessionId: 'no-such-session' },
    })) as ChatToolResult;
    expect(unknownSession.isError).toBe(true);
    expect(unknownSession.content[0]!.text).toMatch(/^SESSION_NOT_FOUND: /);

    const unknownTool = (await client.callTool({
      name: 'chat_with_nobody',
      arguments: { message: 'hi' },
    })) as ChatToolResult;
    expect(unknownTool.isError).toBe(true);
    expect(unknownTool.content[0]!.text).toContain('chat_with_planner');
  });
}

describe('Cairn as an MCP server over Streamable HTTP (POST /mcp)', () => {
  let t: TestApp;
  let url: URL;
  beforeAll(async () => {
    t = await startTestApp({ agents: AGENTS, server: { apiKey: API_KEY } });
    const address = await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    url = new URL(`${address}/mcp`);
  });
  afterAll(async () => t.close());
  afterEach(() => t.fake!.reset());

  describeChatTools(
    async () => {
      const client = new Client({ name: 'test', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(url, {
          requestInit: { headers: { Authorization: `Bearer ${API_KEY}` } },
        }),
      );
      return client;
    },
    () => t.fake!,
  );

  it('refuses a client without the bearer key', async () => {
    const client = new Client({ name: 'test', version: '1.0.0' });
    await expect(client.connect(new StreamableHTTPClientTransport(url))).rejects.toThrow(
      /UNAUTHORIZED/,
    );
    const res = await t.app.server.inject({ method: 'POST', url: '/mcp', payload: {} });
    expect(res.statusCode).toBe(401);
    expect(res.json<{ error: { code: string } }>().error.code).toBe('UNAUTHORIZED');
  });

  it('answers GET /mcp with 405 (stateless endpoint)', async () => {
    const res = await t.app.server.inject({
      method: 'GET',
      url: '/mcp',
      headers: { authorization: `Bearer ${API_KEY}` },
    });
    expect(res.statusCode).toBe(405);
    expect(res.headers['allow']).toBe('POST');
  });

  it('answers a body that is not JSON-RPC with a JSON-RPC error, not a 500', async () => {
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/mcp',
      headers: {
        authorization: `Bearer ${API_KEY}`,
        accept: 'application/json, text/event-stream',
      },
      payload: { hello: 'world' },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json<{ jsonrpc: string; error: { code: number } }>()).toMatchObject({
      jsonrpc: '2.0',
    });
  });
});

describe('Cairn as an MCP server over stdio (cairn mcp)', () => {
  let fake: FakeLlmServer;
  let home: string;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({ agents: AGENTS }, fake.baseURL);
  });
  afterAll(async () => {
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });
  afterEach(() => fake.reset());

  describeChatTools(
    async () => {
      const client = new Client({ name: 'test', version: '1.0.0' });
      await client.connect(
        new StdioClientTransport({
          command: process.execPath,
          args: [CLI_PATH, 'mcp'],
          env: { CAIRN_HOME: home, CAIRN_DB: dbPathOf(home), PATH: process.env.PATH ?? '' },
          stderr: 'pipe',
        }),
      );
      return client;
    },
    () => fake,
  );
});

describe('cairn mcp answers lines it cannot read with JSON-RPC errors', () => {
  let fake: FakeLlmServer;
  let home: string;
  beforeAll(async () => {
    fake = await startFakeLlmServer();
    home = makeHome({ agents: AGENTS }, fake.baseURL);
  });
  afterAll(async () => {
    await fake.close();
    rmSync(home, { recursive: true, force: true });
  });

  it('garbage is -32700, a batch or a non-message -32600, a blank line nothing; the server goes on', async () => {
    const child = spawn(process.execPath, [CLI_PATH, 'mcp'], {
      env: { CAIRN_HOME: home, CAIRN_DB: dbPathOf(home), PATH: process.env.PATH ?? '' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const next = async () => JSON.parse((await lines.next()).value as string) as RpcLine;
    const send = (line: string) => child.stdin.write(`${line}\n`);

    send('this is not json');
    expect(await next()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32700 } });
    send('[{"jsonrpc":"2.0","id":1,"method":"ping"}]');
    const batch = await next();
    expect(batch).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(batch.error!.message).toContain('batch');
    send('');
    send('{"jsonrpc":"2.0","id":7,"method":5}');
    expect(await next()).toMatchObject({ id: 7, error: { code: -32600 } });
    send(
      '{"jsonrpc":"2.0","id":8,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}',
    );
    const initialized = await next();
    expect(initialized.id).toBe(8);
    expect(initialized.result!.serverInfo.name).toBe('cairn');

    child.stdin.end();
    expect(await exited).toBe(0);
  }, 30_000);
});

describe('progress heartbeat', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp({ agents: AGENTS });
  });
  afterAll(async () => t.close());

  it('a turn waiting on a slow model call keeps sending progress', async () => {
    // The model takes 40 heartbeats to answer: the client hears that the turn is alive meanwhile.
    t.fake!.script({ content: 'done at last', delayMs: 2_000 });
    const server = createCairnMcpServer({
      chats: t.app.chats,
      agents: t.app.agents,
      progressHeartbeatMs: 50,
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await server.connect(serverSide);
    const client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(clientSide);
    const messages: (string | undefined)[] = [];
    const result = (await client.callTool(
      { name: 'chat_with_planner', arguments: { message: 'take your time' } },
      undefined,
      { onprogress: (p) => messages.push(p.message) },
    )) as ChatToolResult;
    expect(result.structuredContent?.reply).toBe('done at last');
    expect(messages).toContain('Still working.');
    await client.close();
  });
});
