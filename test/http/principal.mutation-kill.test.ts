/**
 * The principal of a request and what it implies: the admin when no auth hook
 * named one, the owner a new row records, what it may see and use, and the
 * end user a request names (printable, 1 to 200 characters, one header).
 */
import type { AddressInfo } from 'node:net';
import net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import {
  auditBy,
  checkEndUser,
  END_USER_MAX_CHARS,
  endUserHeader,
  mayUseAgent,
  ownerOf,
  owns,
  principalOf,
  setPrincipal,
  withEndUser,
  type Principal,
} from '../../src/http/principal.js';
import type { KeyRow } from '../../src/store/store.js';

function key(id: string, agents: KeyRow['agents']): KeyRow {
  return {
    id,
    name: id,
    agents,
    limits: {},
    created_at: '2026-01-01T00:00:00.000Z',
    last_used_at: null,
    revoked_at: null,
  };
}

const admin: Principal = { kind: 'admin', user: null };
const client: Principal = {
  kind: 'client',
  key: key('key_a', ['assistant', 'helper']),
  user: 'ann',
};

/** The VALIDATION_ERROR message `run` throws (fails when it does not). */
function refusedWith(run: () => unknown): string {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(CairnError);
    expect((error as CairnError).code).toBe('VALIDATION_ERROR');
    return (error as CairnError).message;
  }
  throw new Error('expected a refusal');
}

describe('the principal of a request', () => {
  let app: FastifyInstance;

  beforeAll(async () => {
    app = Fastify();
    app.get('/who', async (request) => {
      if (request.headers['x-as-client'] !== undefined) setPrincipal(request, client);
      return principalOf(request);
    });
    app.get('/user', async (request) => ({ user: endUserHeader(request) }));
    app.setErrorHandler((error, _request, reply) => {
      const code = error instanceof CairnError ? error.code : 'OTHER';
      return reply.status(400).send({ code, message: (error as Error).message });
    });
    await app.ready();
  });
  afterAll(async () => app.close());

  it('is the admin with no end user when no hook set one, else the one set', async () => {
    expect((await app.inject({ url: '/who' })).json()).toEqual({ kind: 'admin', user: null });
    const set = await app.inject({ url: '/who', headers: { 'x-as-client': '1' } });
    expect(set.json()).toMatchObject({ kind: 'client', user: 'ann', key: { id: 'key_a' } });
  });

  it('reads the end user from X-Cairn-User, null when absent', async () => {
    expect((await app.inject({ url: '/user' })).json()).toEqual({ user: null });
    const named = await app.inject({ url: '/user', headers: { 'x-cairn-user': 'zoë 42' } });
    expect(named.json()).toEqual({ user: 'zoë 42' });
  });

  it('refuses a value that cannot name a user, saying where', async () => {
    const empty = await app.inject({ url: '/user', headers: { 'x-cairn-user': '' } });
    expect(empty.json()).toEqual({
      code: 'VALIDATION_ERROR',
      message: `The X-Cairn-User header must be 1 to ${END_USER_MAX_CHARS} printable characters naming the end user.`,
    });
  });
});

describe('X-Cairn-User sent twice over a real socket', () => {
  let app: FastifyInstance;
  let port: number;

  beforeAll(async () => {
    app = Fastify();
    app.get('/user', async (request) => ({ user: endUserHeader(request) }));
    app.setErrorHandler((error, _request, reply) =>
      reply.status(400).send({
        code: error instanceof CairnError ? error.code : 'OTHER',
        message: (error as Error).message,
      }),
    );
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => app.close());

  /** The response body to a GET /user with these raw header lines. */
  function get(headerLines: string[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write(
          [
            'GET /user HTTP/1.1',
            'Host: localhost',
            ...headerLines,
            'Connection: close',
            '',
            '',
          ].join('\r\n'),
        );
      });
      let text = '';
      socket.on('data', (chunk) => (text += String(chunk)));
      socket.on('error', reject);
      socket.on('end', () => resolve(JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4))));
    });
  }

  it('is refused, though Node joins the two into one "a, b" value', async () => {
    expect(await get(['X-Cairn-User: ann', 'x-cairn-user: bob'])).toEqual({
      code: 'VALIDATION_ERROR',
      message: 'Send the X-Cairn-User header once.',
    });
    expect(await get(['X-Cairn-User: ann', 'Accept: */*'])).toEqual({ user: 'ann' });
    expect(await get(['Accept: */*'])).toEqual({ user: null });
  });
});

describe('end user names', () => {
  it('accepts 1 to 200 printable characters, as given', () => {
    expect(checkEndUser('a', 'user')).toBe('a');
    const longest = 'x'.repeat(END_USER_MAX_CHARS);
    expect(checkEndUser(longest, 'user')).toBe(longest);
    expect(checkEndUser('  Ann Lee  ', 'user')).toBe('  Ann Lee  ');
  });

  it('refuses an empty name, one over 200 characters, and control characters anywhere', () => {
    expect(END_USER_MAX_CHARS).toBe(200);
    expect(refusedWith(() => checkEndUser('', 'where'))).toBe(
      'where must be 1 to 200 printable characters naming the end user.',
    );
    refusedWith(() => checkEndUser('x'.repeat(END_USER_MAX_CHARS + 1), 'user'));
    refusedWith(() => checkEndUser('ann\nlee', 'user'));
    refusedWith(() => checkEndUser('ann\u0000', 'user'));
    refusedWith(() => checkEndUser('\u007f', 'user'));
  });

  it('withEndUser keeps the principal when no user is named, and checks one that is', () => {
    expect(withEndUser(client, undefined)).toBe(client);
    expect(withEndUser(admin, 'bob')).toEqual({ kind: 'admin', user: 'bob' });
    const unnamed = { ...client, user: null };
    expect(withEndUser(unnamed, 'bob')).toEqual({ ...client, user: 'bob' });
    // The header named ann: the same name in the body is fine, another is a 400.
    expect(withEndUser(client, 'ann')).toEqual(client);
    expect(refusedWith(() => withEndUser(client, 'bob'))).toMatch(/names the end user "ann"/);
    expect(refusedWith(() => withEndUser(admin, ''))).toMatch(/^user must be 1 to 200/);
  });
});

describe('owners, visibility and agents', () => {
  it('records the key and end user as owner (null key for the admin), and as the audit by', () => {
    expect(ownerOf(client)).toEqual({ key: 'key_a', user: 'ann' });
    expect(ownerOf({ kind: 'admin', user: 'root' })).toEqual({ key: null, user: 'root' });
    expect(auditBy(client)).toEqual({ key: 'key_a', user: 'ann' });
    expect(auditBy(admin)).toEqual({ key: null, user: null });
  });

  it('lets the admin see every row and a key only its own', () => {
    expect(owns(admin, null)).toBe(true);
    expect(owns(admin, 'key_b')).toBe(true);
    expect(owns(client, 'key_a')).toBe(true);
    expect(owns(client, 'key_b')).toBe(false);
    expect(owns(client, null)).toBe(false);
  });

  it("lets the admin use any agent, a '*' key any, and a listed key only its names", () => {
    expect(mayUseAgent(admin, 'anything')).toBe(true);
    expect(mayUseAgent({ kind: 'client', key: key('k', '*'), user: null }, 'anything')).toBe(true);
    expect(mayUseAgent(client, 'helper')).toBe(true);
    expect(mayUseAgent(client, 'other')).toBe(false);
    expect(mayUseAgent({ kind: 'client', key: key('k', []), user: null }, 'assistant')).toBe(false);
  });
});
