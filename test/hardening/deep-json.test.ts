/**
 * Deep JSON is refused where a body is parsed, before anything walks it:
 * 400 JSON_TOO_DEEP on Cairn's routes (`json_too_deep` on /v1), JSON-RPC's
 * -32602 on A2A and MCP (a 5 000-deep A2A data part once overflowed the
 * stack: -32603). Through `inject` on a real app.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../../src/json-depth.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

let harness: TestApp;

beforeAll(async () => {
  harness = await startTestApp({ fake: null });
});

afterAll(async () => {
  await harness.close();
});

/** `{"a":{"a":…}}` nested `levels` deep, as text (JSON.stringify would recurse too). */
function nested(levels: number): string {
  return `${'{"a":'.repeat(levels - 1)}{}${'}'.repeat(levels - 1)}`;
}

const post = (url: string, payload: string, headers: Record<string, string> = {}) =>
  harness.app.server.inject({
    method: 'POST',
    url,
    payload,
    headers: { 'content-type': 'application/json', ...headers },
  });

describe('deep JSON', () => {
  it('a chat body deeper than the cap is 400 JSON_TOO_DEEP; at the cap it is read', async () => {
    const deep = await post('/agents/assistant/chat', `{"message":"hi","x":${nested(5_000)}}`);
    expect(deep.statusCode).toBe(400);
    expect(deep.json().error.code).toBe('JSON_TOO_DEEP');
    const fits = await post(
      '/agents/assistant/chat',
      `{"message":"hi","x":${nested(MAX_JSON_DEPTH - 1)}}`,
    );
    // Read and judged by the route's schema (no "x" there), not refused for its depth.
    expect(fits.json().error.code).toBe('VALIDATION_ERROR');
  });

  it('/v1 answers json_too_deep in OpenAI shape', async () => {
    const res = await post(
      '/v1/chat/completions',
      `{"model":"assistant","messages":[{"role":"user","content":"hi"}],"metadata":${nested(5_000)}}`,
    );
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('json_too_deep');
  });

  it('A2A: a 5 000-deep data part is -32602, not a stack overflow', async () => {
    const res = await post(
      '/a2a/assistant',
      `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"data":${nested(5_000)}}]}}}`,
      { 'a2a-version': '1.0' },
    );
    expect(res.json().error.code).toBe(-32602);
  });

  it('MCP: a deep call is -32602 in JSON-RPC shape', async () => {
    const res = await post(
      '/mcp',
      `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"chat_with_assistant","arguments":${nested(5_000)}}}`,
      { accept: 'application/json, text/event-stream' },
    );
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32602 } });
  });
});
