/**
 * Property tests (fast-check) against the routes' inputs —
 * wrong types, extra properties, `__proto__` / `constructor.prototype` keys
 * sent as raw JSON text, deep nesting, huge strings, hostile path segments and
 * query strings. Every answer is a 4xx with a validation-style code, never a
 * 5xx, nothing is coerced into a valid request, nothing is stored, nothing
 * reaches the model, and the test process's prototypes stay clean.
 *
 * Also hostile agent names and session ids (traversal, encoded
 * traversal, backslashes, NUL, 300 characters, Unicode lookalikes) are 400 or
 * 404 everywhere and touch no file.
 */
import { jsonDepth, MAX_JSON_DEPTH } from '../../src/json-depth.js';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_BODY_LIMIT_BYTES } from '../../src/config/settings.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const NUM_RUNS = 100;
const AGENT_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;
/** The nesting depth of `text` if it is JSON, else 0. */
function parsedDepth(text: string): number {
  try {
    return jsonDepth(JSON.parse(text));
  } catch {
    return 0;
  }
}

const VALIDATION_CODES = [
  'VALIDATION_ERROR',
  'JSON_TOO_DEEP',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
];

/** Any JSON value that is not a string. */
const notString: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
);

/** Any JSON value that is not a number, numeric strings included (no coercion allowed). */
const notNumber: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer({ min: 1, max: 99 }).map(String),
  fc.double({ min: 1, max: 99, noNaN: true }).map(String),
  fc.string({ maxLength: 10 }),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.integer({ min: 1, max: 99 }), { minLength: 1, maxLength: 2 }),
  fc.record({ value: fc.integer({ min: 1, max: 99 }) }),
);

/** A string that is not a valid agent name. */
const badName = fc
  .oneof(
    fc.string({ maxLength: 80, unit: 'grapheme' }),
    fc.constantFrom('../x', 'Assistant', 'аssistant', 'a\\b', 'a\u0000b', 'a'.repeat(65), ''),
  )
  .filter((s) => !AGENT_NAME.test(s));

/** A string that is not a valid session id. */
const badSessionId = fc
  .oneof(
    fc.string({ maxLength: 80, unit: 'grapheme' }),
    fc.constantFrom('sess_', 'sess_../x', 'sess_аbc', `sess_${'a'.repeat(65)}`, 'SESS_abc'),
  )
  .filter((s) => !/^sess_[A-Za-z0-9]{1,64}$/.test(s));

/** Nested arrays or objects `depth` levels deep, as JSON text. */
const deepJson = fc
  .tuple(fc.integer({ min: 50, max: 20_000 }), fc.boolean())
  .map(([depth, arrays]) =>
    arrays
      ? '['.repeat(depth) + ']'.repeat(depth)
      : '{"a":'.repeat(depth) + '1' + '}'.repeat(depth),
  );

/** A string of up to a few times the default body limit. */
const hugeString = fc
  .tuple(
    fc.integer({ min: 10_000, max: DEFAULT_BODY_LIMIT_BYTES * 2 }),
    fc.constantFrom('x', ' ', 'é'),
  )
  .map(([length, char]) => char.repeat(length));

/** An object key that is none of `known` (and not a prototype key, tested separately). */
function extraKey(known: readonly string[]): fc.Arbitrary<string> {
  return fc
    .string({ minLength: 1, maxLength: 24, unit: 'grapheme' })
    .filter((k) => !known.includes(k) && k !== '__proto__');
}

/** Builds JSON object text from entries whose values are already JSON text. */
function objectText(entries: [string, string][]): string {
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`;
}

/**
 * Invalid bodies for a route, as JSON text: one mutation applied to a valid base.
 * `fields` maps each known field to generators of invalid values (as JSON text).
 */
function invalidBodies(
  valid: Record<string, unknown>,
  required: string,
  fields: Record<string, fc.Arbitrary<string>>,
  /** Fields where any string under the body limit is valid (a chat message). */
  longTextFields: readonly string[] = [],
): fc.Arbitrary<string> {
  const known = Object.keys(fields);
  const shortFields = known.filter((k) => !longTextFields.includes(k));
  const base = (): [string, string][] =>
    Object.entries(valid).map(([k, v]) => [k, JSON.stringify(v)]);
  const replace = (key: string, value: string): string =>
    objectText([...base().filter(([k]) => k !== key), [key, value]]);
  const protoValue = fc.jsonValue({ maxDepth: 2 }).map((v) => JSON.stringify(v));
  return fc.oneof(
    // A wrong value for one field.
    ...Object.entries(fields).map(([key, values]) => values.map((v) => replace(key, v))),
    // An unknown field.
    fc
      .tuple(extraKey(known), fc.jsonValue({ maxDepth: 3 }))
      .map(([k, v]) => objectText([...base(), [k, JSON.stringify(v)]])),
    // The required field missing.
    fc.constant(objectText(base().filter(([k]) => k !== required))),
    // Not an object at all.
    fc
      .oneof(fc.array(fc.jsonValue({ maxDepth: 2 })), fc.string(), fc.double(), fc.boolean())
      .map((v) => JSON.stringify(v) ?? 'null'),
    fc.constant('null'),
    // Prototype keys as raw text, at the top level or nested, anywhere among the fields.
    fc
      .tuple(
        fc.constantFrom('__proto__', 'constructor'),
        protoValue,
        fc.nat(known.length),
        fc.boolean(),
      )
      .map(([key, value, at, nested]) => {
        const payload =
          key === 'constructor' ? `{"prototype":{"polluted":${value}}}` : `{"polluted":${value}}`;
        const entries = base();
        entries.splice(at, 0, nested ? ['meta', objectText([[key, payload]])] : [key, payload]);
        return objectText(entries);
      }),
    // Deep nesting, in a known field or an unknown one.
    fc.tuple(deepJson, fc.constantFrom(...known, 'deep')).map(([deep, key]) => replace(key, deep)),
    // Huge strings in a field that cannot hold them, or as an unknown key.
    fc
      .tuple(hugeString, fc.constantFrom(...shortFields))
      .map(([huge, key]) => replace(key, JSON.stringify(huge))),
    hugeString.map((huge) => objectText([...base(), [huge.slice(0, 100_000), '1']])),
  );
}

const json = (arb: fc.Arbitrary<unknown>): fc.Arbitrary<string> =>
  arb.map((v) => JSON.stringify(v));

describe('fuzzing the HTTP inputs', () => {
  let t: TestApp;
  let sessionId: string;
  beforeAll(async () => {
    t = await startTestApp();
    const res = await t.app.server.inject({
      method: 'POST',
      url: '/sessions',
      payload: { agentName: 'assistant' },
    });
    sessionId = res.json().session.id;
  });
  afterAll(async () => t.close());
  beforeEach(() => t.fake!.reset());

  async function sessionCount(): Promise<number> {
    return (await t.app.store.listSessions({ limit: 500 })).items.length;
  }

  async function messageCount(): Promise<number> {
    return (await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 1000 })).length;
  }

  /** Sends raw JSON text and checks the answer is a validation 4xx in the error envelope. */
  async function expectRejected(method: 'POST', url: string, text: string): Promise<void> {
    const res = await t.app.server.inject({
      method,
      url,
      headers: { 'content-type': 'application/json' },
      payload: text,
    });
    const tooLarge = Buffer.byteLength(text) > DEFAULT_BODY_LIMIT_BYTES;
    expect(res.statusCode, text.slice(0, 200)).toBe(tooLarge ? 413 : 400);
    const body = res.json();
    expect(body).toEqual({ error: { code: expect.any(String), message: expect.any(String) } });
    // Nesting past MAX_JSON_DEPTH is refused as such before the route's schema sees it.
    const invalid = parsedDepth(text) > MAX_JSON_DEPTH ? 'JSON_TOO_DEEP' : 'VALIDATION_ERROR';
    expect(body.error.code).toBe(tooLarge ? 'PAYLOAD_TOO_LARGE' : invalid);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    expect((Object.prototype as Record<string, unknown>).polluted).toBeUndefined();
  }

  it('POST /sessions: invalid bodies are always 400/413, never stored', async () => {
    const before = await sessionCount();
    const bodies = invalidBodies(
      { agentName: 'assistant', title: 'x', compactCount: 50 },
      'agentName',
      {
        agentName: fc.oneof(json(notString), json(badName)),
        title: fc.oneof(
          json(notString),
          fc.string({ minLength: 501, maxLength: 600 }).map((s) => JSON.stringify(s)),
        ),
        compactCount: fc.oneof(
          json(notNumber),
          json(
            fc.oneof(
              fc.double({ max: 0.999, noNaN: true, noDefaultInfinity: true }),
              fc.double({ min: 99.001, noNaN: true, noDefaultInfinity: true }),
            ),
          ),
        ),
      },
    );
    await fc.assert(
      fc.asyncProperty(bodies, async (text) => expectRejected('POST', '/sessions', text)),
      { numRuns: NUM_RUNS },
    );
    expect(await sessionCount()).toBe(before);
  });

  it('POST /agents/:name/chat: invalid bodies are always 400/413 and never reach the model', async () => {
    const beforeSessions = await sessionCount();
    const beforeMessages = await messageCount();
    const bodies = invalidBodies(
      { message: 'hello', sessionId, stream: false },
      'message',
      {
        message: fc.oneof(
          json(notString),
          json(fc.constantFrom('', ' ', '\n\t', '\u00a0\u2003'.trim() + '   ')),
        ),
        sessionId: fc.oneof(json(notString), json(badSessionId)),
        stream: fc.oneof(json(fc.constantFrom('true', 'false', 1, 0, null, [], {}))),
      },
      ['message'],
    );
    const overLimit = fc
      .integer({ min: DEFAULT_BODY_LIMIT_BYTES, max: DEFAULT_BODY_LIMIT_BYTES * 2 })
      .map((n) => JSON.stringify({ message: 'x'.repeat(n) }));
    await fc.assert(
      fc.asyncProperty(fc.oneof(bodies, overLimit), async (text) =>
        expectRejected('POST', '/agents/assistant/chat', text),
      ),
      { numRuns: NUM_RUNS },
    );
    expect(t.fake!.requests).toHaveLength(0);
    expect(await sessionCount()).toBe(beforeSessions);
    expect(await messageCount()).toBe(beforeMessages);
  });

  it("chat: any message text is answered and stored as sent, the tokenizer's special tokens included", async () => {
    // "<|endoftext|>" and its kin made the token estimate throw: a 500 for merely mentioning one.
    const specials = fc.constantFrom(
      '<|endoftext|>',
      '<|im_start|>',
      '<|im_end|>',
      '<|fim_prefix|>',
      '<|endofprompt|>',
    );
    const texts = fc
      .tuple(fc.string({ maxLength: 40, unit: 'grapheme' }), specials, fc.string({ maxLength: 40 }))
      .map(([before, special, after]) => `${before}${special}${after}`);
    await fc.assert(
      fc.asyncProperty(texts, async (message) => {
        const res = await t.app.server.inject({
          method: 'POST',
          url: '/agents/assistant/chat',
          payload: { message, sessionId },
        });
        expect(res.statusCode, message).toBe(200);
        const stored = await t.app.store.listMessages(sessionId, { afterSeq: 0, limit: 1000 });
        expect(stored.at(-2)).toMatchObject({ role: 'user', content: message });
      }),
      { numRuns: 20 },
    );
    expect(t.fake!.requests.length).toBeGreaterThanOrEqual(20);
  });

  it('POST /sessions and chat: arbitrary JSON is never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.jsonValue({ maxDepth: 4 }),
        fc.constantFrom('/sessions', '/agents/assistant/chat'),
        async (value, url) => {
          const res = await t.app.server.inject({
            method: 'POST',
            url,
            headers: { 'content-type': 'application/json' },
            payload: JSON.stringify(value),
          });
          expect(res.statusCode).toBeLessThan(500);
          if (res.statusCode >= 400) expect(VALIDATION_CODES).toContain(res.json().error.code);
        },
      ),
      { numRuns: NUM_RUNS },
    );
  });

  it('GET /sessions: any query string is a 200 or a 400, never a 5xx', async () => {
    const knownKey = fc.constantFrom(
      'agentName',
      'status',
      'mode',
      'parentSessionId',
      'limit',
      'cursor',
    );
    const value = fc.oneof(
      fc.string({ maxLength: 30, unit: 'grapheme' }),
      fc.string({ maxLength: 30, unit: 'binary-ascii' }),
      fc.integer().map(String),
      fc.double().map(String),
      fc.constantFrom(
        'active',
        'closed',
        'chat',
        'task',
        '1',
        '500',
        '501',
        '0',
        '-1',
        'assistant',
      ),
      fc.string({ maxLength: 2000 }).map((s) => Buffer.from(s).toString('base64url')),
      fc
        .jsonValue({ maxDepth: 2 })
        .map((v) => Buffer.from(JSON.stringify(v) ?? '').toString('base64url')),
    );
    const pairs = fc.array(
      fc.tuple(
        fc.oneof(knownKey, knownKey, fc.string({ maxLength: 12 }), fc.constant('__proto__')),
        value,
      ),
      { maxLength: 6 },
    );
    await fc.assert(
      fc.asyncProperty(pairs, async (entries) => {
        const query = new URLSearchParams(entries).toString();
        const res = await t.app.server.inject({ url: `/sessions?${query}` });
        expect([200, 400], query).toContain(res.statusCode);
        const body = res.json();
        if (res.statusCode === 200) {
          expect(Array.isArray(body.sessions)).toBe(true);
        } else {
          expect(body.error.code).toBe('VALIDATION_ERROR');
        }
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('GET /sessions: an invalid filter is always 400, never coerced', async () => {
    const invalid = fc.oneof(
      fc
        .string({ maxLength: 10 })
        .filter((s) => !['active', 'closed'].includes(s))
        .map((v) => ['status', v]),
      fc
        .string({ maxLength: 10 })
        .filter((s) => !['chat', 'task', 'subagent', 'daemon'].includes(s))
        .map((v) => ['mode', v]),
      fc
        .oneof(
          fc.integer({ max: 0 }),
          fc.integer({ min: 501 }),
          fc.double({ min: 1.01, max: 499.99 }).filter((d) => !Number.isInteger(d)),
        )
        .map((v) => ['limit', String(v)]),
      fc
        .string({ minLength: 1, maxLength: 10 })
        .filter((s) => Number.isNaN(Number(s)))
        .map((v) => ['limit', v]),
      badName.filter((s) => s !== '').map((v) => ['agentName', v]),
      badSessionId.filter((s) => s !== '').map((v) => ['parentSessionId', v]),
      fc.string({ minLength: 513, maxLength: 600 }).map((v) => ['cursor', v]),
      extraKey(['agentName', 'status', 'mode', 'parentSessionId', 'limit', 'cursor']).map((k) => [
        k,
        'x',
      ]),
    ) as fc.Arbitrary<[string, string]>;
    await fc.assert(
      fc.asyncProperty(invalid, async (entry) => {
        const query = new URLSearchParams([entry]).toString();
        const res = await t.app.server.inject({ url: `/sessions?${query}` });
        expect(res.statusCode, query).toBe(400);
        expect(res.json().error.code).toBe('VALIDATION_ERROR');
      }),
      { numRuns: NUM_RUNS },
    );
  });

  it('path parameters: any agent name or session id is a 400 or 404, never a 5xx', async () => {
    const encoded = fc.oneof(
      badName.map(encodeURIComponent),
      badSessionId.map(encodeURIComponent),
      fc.stringMatching(/^[a-z0-9]{1,20}$/).filter((s) => s !== 'assistant'),
      fc.stringMatching(/^sess_[a-f0-9]{24}$/),
      // Raw text with stray or broken percent escapes, dots and slashes.
      fc
        .array(
          fc.constantFrom('%', '%2', '%2e', '%2F', '%00', '%E0%A4%A', '.', '/', '\\', 'a', 'Z'),
          {
            minLength: 1,
            maxLength: 12,
          },
        )
        .map((parts) => parts.join('')),
    );
    const routes = [
      (p: string) => ({ method: 'GET' as const, url: `/agents/${p}` }),
      (p: string) => ({
        method: 'POST' as const,
        url: `/agents/${p}/chat`,
        payload: { message: 'hi' },
      }),
      (p: string) => ({ method: 'GET' as const, url: `/sessions/${p}` }),
      (p: string) => ({ method: 'GET' as const, url: `/sessions/${p}/messages` }),
      (p: string) => ({ method: 'POST' as const, url: `/sessions/${p}/reset` }),
      (p: string) => ({ method: 'POST' as const, url: `/sessions/${p}/close` }),
      (p: string) => ({ method: 'DELETE' as const, url: `/sessions/${p}` }),
    ];
    await fc.assert(
      fc.asyncProperty(encoded, fc.nat(routes.length - 1), async (segment, index) => {
        const res = await t.app.server.inject(routes[index]!(segment));
        expect([400, 404], `${routes[index]!(segment).url}`).toContain(res.statusCode);
        expect(['VALIDATION_ERROR', 'NOT_FOUND', 'AGENT_NOT_FOUND', 'SESSION_NOT_FOUND']).toContain(
          res.json().error.code,
        );
      }),
      { numRuns: NUM_RUNS },
    );
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('POST /sessions/:id/reset and close: any body but nothing or {} is a 400', async () => {
    const body = fc
      .jsonValue({ maxDepth: 3 })
      .filter(
        (v) =>
          v !== null &&
          !(typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 0),
      );
    const before = await messageCount();
    await fc.assert(
      fc.asyncProperty(body, fc.constantFrom('reset', 'close'), async (value, action) => {
        const res = await t.app.server.inject({
          method: 'POST',
          url: `/sessions/${sessionId}/${action}`,
          headers: { 'content-type': 'application/json' },
          payload: JSON.stringify(value),
        });
        expect(res.statusCode).toBe(400);
        expect(res.json().error.code).toBe('VALIDATION_ERROR');
      }),
      { numRuns: NUM_RUNS },
    );
    const session = (await t.app.server.inject({ url: `/sessions/${sessionId}` })).json().session;
    expect(session.status).toBe('active');
    expect(await messageCount()).toBe(before);
  });
});

/** Every path under `dir`, relative to it. */
function listTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (current: string): void => {
    for (const entry of readdirSync(current, { withFileTypes: true })) {
      const path = join(current, entry.name);
      out.push(relative(dir, path));
      if (entry.isDirectory()) walk(path);
    }
  };
  walk(dir);
  return out.sort();
}

describe('hostile agent names and session ids', () => {
  /** Path segments as they go on the wire: some raw, some percent-encoded. */
  const SEGMENTS: [label: string, segment: string][] = [
    ['../x, raw', '../x'],
    ['../x, encoded', encodeURIComponent('../x')],
    ['%2e%2e%2f', '%2e%2e%2f'],
    ['%2e%2e%2fx', '%2e%2e%2fx'],
    ['..', '..'],
    ['/etc/passwd, encoded', encodeURIComponent('/etc/passwd')],
    ['../../../../etc/passwd, encoded', encodeURIComponent('../../../../etc/passwd')],
    ['a\\b, encoded', encodeURIComponent('a\\b')],
    ['a\\b, raw', 'a\\b'],
    ['a NUL byte', 'a%00b'],
    ['only a NUL byte', '%00'],
    ['300 characters', 'a'.repeat(300)],
    ['a Cyrillic lookalike', encodeURIComponent('аssistant')],
    ['a session id with traversal', encodeURIComponent('sess_../../x')],
    ['a session id with a Cyrillic lookalike', encodeURIComponent('sess_аbc')],
    ['a session id of 300 characters', `sess_${'a'.repeat(295)}`],
  ];
  /** The same names as values (decoded), for bodies and query strings. */
  const VALUES = [
    '../x',
    '../../x',
    '/etc/passwd',
    '..\\..\\x',
    'a\\b',
    'a\u0000b',
    '\u0000',
    'a'.repeat(300),
    'аssistant',
    'sess_../../x',
    'sess_аbc',
    `sess_${'a'.repeat(300)}`,
  ];
  /** Files a careless implementation could create or read for these names. */
  const probeNames = ['x', 'passwd', 'b', 'a\\b', 'аssistant', 'a'.repeat(300)];

  let t: TestApp;
  let homeBefore: string[];
  let probesBefore: Map<string, boolean>;
  const probePaths = (): string[] => {
    const bases = [
      t.home,
      join(t.home, 'agents'),
      join(t.home, 'data'),
      resolve(t.home, '..'),
      tmpdir(),
    ];
    return bases.flatMap((base) =>
      probeNames.flatMap((name) => [resolve(base, name), resolve(base, name, 'agent.json')]),
    );
  };

  beforeAll(async () => {
    t = await startTestApp();
    homeBefore = listTree(t.home);
    probesBefore = new Map(probePaths().map((p) => [p, existsSync(p)]));
  });
  afterAll(async () => t.close());

  function expectRefused(res: { statusCode: number; json: () => unknown }, what: string): void {
    expect([400, 404], what).toContain(res.statusCode);
    const body = res.json() as { error: { code: string; message: string } };
    expect(
      ['VALIDATION_ERROR', 'NOT_FOUND', 'AGENT_NOT_FOUND', 'SESSION_NOT_FOUND'],
      what,
    ).toContain(body.error.code);
  }

  it.each(SEGMENTS)('agent name %s is refused on every agent route', async (_label, segment) => {
    expectRefused(await t.app.server.inject({ url: `/agents/${segment}` }), 'GET /agents/:name');
    expectRefused(
      await t.app.server.inject({
        method: 'POST',
        url: `/agents/${segment}/chat`,
        payload: { message: 'hi' },
      }),
      'POST /agents/:name/chat',
    );
  });

  it.each(SEGMENTS)('session id %s is refused on every session route', async (_label, segment) => {
    for (const [method, url] of [
      ['GET', `/sessions/${segment}`],
      ['GET', `/sessions/${segment}/messages`],
      ['POST', `/sessions/${segment}/reset`],
      ['POST', `/sessions/${segment}/close`],
      ['DELETE', `/sessions/${segment}`],
    ] as const) {
      expectRefused(await t.app.server.inject({ method, url }), `${method} ${url}`);
    }
  });

  it('a lookalike, a traversal or an over-long name is a 400, not a lookup', async () => {
    for (const segment of [
      encodeURIComponent('аssistant'),
      encodeURIComponent('../assistant'),
      'a'.repeat(300),
      'a%00b',
    ]) {
      const res = await t.app.server.inject({ url: `/agents/${segment}` });
      expect(res.statusCode, segment).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
  });

  it.each(VALUES)('%j as a name or id in a body or query string is a 400', async (value) => {
    const responses = [
      await t.app.server.inject({
        method: 'POST',
        url: '/sessions',
        payload: { agentName: value },
      }),
      await t.app.server.inject({
        method: 'POST',
        url: '/agents/assistant/chat',
        payload: { message: 'hi', sessionId: value },
      }),
      await t.app.server.inject({
        url: `/sessions?${new URLSearchParams({ agentName: value }).toString()}`,
      }),
      await t.app.server.inject({
        url: `/sessions?${new URLSearchParams({ parentSessionId: value }).toString()}`,
      }),
    ];
    for (const res of responses) {
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    expect(t.fake!.requests).toHaveLength(0);
  });

  it('touched no file inside or outside the home', () => {
    expect(listTree(t.home)).toEqual(homeBefore);
    for (const path of probePaths()) expect(existsSync(path), path).toBe(probesBefore.get(path));
  });
});
