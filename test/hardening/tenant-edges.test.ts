/**
 * The smaller ways one tenant once reached past its own, found by an attack
 * on the tenant layer, each on a real app: a revoked key's open event stream ends; a
 * header end user and a different body `user` is a 400, not a silent choice;
 * end-user ids are NFKC-normalised, refuse zero-width and bidirectional
 * controls and are counted in characters (an emoji is one); an import has a
 * size cap per request and per key per day.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { NDJSON } from '../../src/http/routes/session-transfer.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const ADMIN_KEY = 'edges-admin';
let t: TestApp | undefined;

afterEach(async () => {
  await t?.close();
  t = undefined;
});

async function issue(app: TestApp): Promise<{ id: string; secret: string }> {
  const res = await app.app.server.inject({
    method: 'POST',
    url: '/keys',
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
    payload: { name: 'tenant' },
  });
  expect(res.statusCode).toBe(201);
  const body = res.json<{ key: { id: string }; secret: string }>();
  return { id: body.key.id, secret: body.secret };
}

describe('a revoked key', () => {
  it('has its open event stream ended, and nothing more delivered on it', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    await t.app.server.listen({ host: '127.0.0.1', port: 0 });
    const port = (t.app.server.server.address() as { port: number }).port;
    const key = await issue(t);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = httpRequest(
        {
          host: '127.0.0.1',
          port,
          path: '/events',
          headers: { authorization: `Bearer ${key.secret}` },
        },
        resolve,
      );
      req.on('error', reject);
      req.end();
    });
    expect(res.statusCode).toBe(200);
    let received = '';
    res.on('data', (chunk: Buffer) => (received += chunk.toString('utf8')));
    const ended = new Promise<void>((resolve) => res.on('close', resolve));

    // The key's own chat is delivered while the key is good.
    const chat = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: `Bearer ${key.secret}` },
      payload: { message: 'before' },
    });
    expect(chat.statusCode).toBe(200);
    const sessionId = chat.json<{ sessionId: string }>().sessionId;
    await expect.poll(() => received.includes(sessionId)).toBe(true);

    const revoked = await t.app.server.inject({
      method: 'DELETE',
      url: `/keys/${key.id}`,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    expect(revoked.statusCode).toBe(200);
    await ended;
    expect(received).toContain('This key was revoked');
    const before = received;
    // The admin continues the key's session: none of it reaches the revoked key's stream.
    await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { message: 'after', sessionId },
    });
    expect(received).toBe(before);
  });
});

describe('end users', () => {
  function complete(headers: Record<string, string>, extra: Record<string, unknown>) {
    return t!.app.server.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, ...headers },
      payload: { model: 'assistant', messages: [{ role: 'user', content: 'hi' }], ...extra },
    });
  }

  it('a header end user and a different body user is a 400 naming both; the same in both is fine', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    const clash = await complete({ 'x-cairn-user': 'alice' }, { user: 'bob' });
    expect(clash.statusCode).toBe(400);
    const message = clash.json<{ error: { message: string } }>().error.message;
    expect(message).toContain('"alice"');
    expect(message).toContain('"bob"');
    const safety = await complete({ 'x-cairn-user': 'alice' }, { safety_identifier: 'mallory' });
    expect(safety.statusCode).toBe(400);
    const same = await complete({ 'x-cairn-user': 'alice' }, { user: 'alice' });
    expect(same.statusCode, same.body).toBe(200);
    expect(t.fake!.requests).toHaveLength(1);
  });

  it('refuses zero-width and bidirectional characters, and normalises look-alikes (NFKC)', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    for (const user of [
      'ali\u200bce',
      'alice\u200d',
      '\u202eecila',
      'al\u2066ice',
      '\ufeffalice',
    ]) {
      const res = await complete({}, { user });
      expect(res.statusCode, JSON.stringify(user)).toBe(400);
      expect(res.body).toContain('invisible character');
    }
    expect(t.fake!.requests).toHaveLength(0);
    // Fullwidth letters are the same name as plain ones.
    const wide = await complete({}, { user: '\uff41\uff4c\uff49\uff43\uff45' });
    expect(wide.statusCode, wide.body).toBe(200);
    const id = wide.headers['x-cairn-session-id'] as string;
    expect((await t.app.store.findSession(id))?.end_user).toBe('alice');
  });

  it('counts characters, not UTF-16 units: 200 emoji are a name, 201 are not', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY } });
    const ok = await complete({}, { user: '😀'.repeat(200) });
    expect(ok.statusCode, ok.body).toBe(200);
    const over = await complete({}, { user: '😀'.repeat(201) });
    expect(over.statusCode).toBe(400);
    expect(over.body).toContain('1 to 200 printable characters');
  });
});

describe('import caps', () => {
  async function exportLines(app: TestApp): Promise<string> {
    const created = await app.app.server.inject({
      method: 'POST',
      url: '/sessions',
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
      payload: { agentName: 'assistant' },
    });
    const id = created.json<{ session: { id: string } }>().session.id;
    const exported = await app.app.server.inject({
      method: 'GET',
      url: `/sessions/${id}/export`,
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    return exported.body;
  }

  function importAs(app: TestApp, token: string, body: string) {
    return app.app.server.inject({
      method: 'POST',
      url: '/sessions/import',
      headers: { authorization: `Bearer ${token}`, 'content-type': NDJSON },
      payload: body,
    });
  }

  it('refuses an import over server.importMaxBytes with 413, keeping nothing of it', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY, importMaxBytes: 4096 } });
    const exported = await exportLines(t);
    const before = (await t.app.store.listSessions({ limit: 100 })).items.length;
    // The same export padded past the cap with blank lines (which an import skips).
    const big = `${exported}\n${' '.repeat(8192)}\n`;
    const res = await importAs(t, ADMIN_KEY, big);
    expect(res.statusCode).toBe(413);
    expect(res.json().error.code).toBe('PAYLOAD_TOO_LARGE');
    expect(res.json().error.message).toContain('server.importMaxBytes');
    expect((await t.app.store.listSessions({ limit: 100 })).items).toHaveLength(before);
    expect((await importAs(t, ADMIN_KEY, exported)).statusCode).toBe(201);
  });

  it('stops a key at server.importDayBytes for the day with 429 KEY_LIMIT; other keys go on', async () => {
    t = await startTestApp({ server: { apiKey: ADMIN_KEY, importDayBytes: 4096 } });
    const exported = await exportLines(t);
    const size = Buffer.byteLength(exported);
    expect(size).toBeLessThan(4096);
    const greedy = await issue(t);
    const other = await issue(t);
    const fits = Math.floor(4096 / size);
    for (let i = 0; i < fits; i++)
      expect((await importAs(t, greedy.secret, exported)).statusCode).toBe(201);
    const refused = await importAs(t, greedy.secret, exported);
    expect(refused.statusCode).toBe(429);
    expect(refused.json().error.code).toBe('KEY_LIMIT');
    expect(refused.json().error.message).toContain('server.importDayBytes');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    expect((await importAs(t, other.secret, exported)).statusCode).toBe(201);
    // The admin has no daily allowance.
    for (let i = 0; i <= fits; i++)
      expect((await importAs(t, ADMIN_KEY, exported)).statusCode).toBe(201);
  });
});
