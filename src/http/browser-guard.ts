/**
 * What keeps a web page from driving a local Cairn, with or without an API
 * key. A page on another site can make the browser talk to 127.0.0.1 by DNS
 * rebinding (its own name re-pointed at this machine: the request then carries
 * that foreign name in `Host`) or by plain cross-site requests (they carry the
 * page's `Origin`). So, before any route runs:
 *
 * - `Host` must name this server: one of the allowed host names (loopback, the
 *   bind address, `server.publicUrl`'s host, `server.allowedHosts`). Ports are
 *   not compared: a rebinding attack is defeated by the name alone, and a
 *   proxy in front may use any port.
 * - A request carrying `Origin` must come from the server's own origin or one
 *   listed in `server.corsOrigins`; listed origins get CORS answers (no
 *   wildcard, so an unlisted page never reads a reply).
 * - Every response says `nosniff` and `no-referrer`, and may not be framed:
 *   the console's pages under a CSP that allows only their own origin.
 */
import { networkInterfaces } from 'node:os';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CairnError } from '../errors.js';

export interface BrowserPolicy {
  /** Host names (lower case, IPv6 in brackets, no port); `.example.com` also allows its subdomains. */
  readonly allowedHosts: readonly string[];
  /** Origins (`scheme://host[:port]`) other sites' pages may call from, with CORS. */
  readonly corsOrigins: readonly string[];
  /** The origin of `server.publicUrl` (the console's origin behind a proxy), or null. */
  readonly publicOrigin: string | null;
}

/** The console's pages may load only their own files (and the page's `data:` icon). */
export const CONSOLE_CSP =
  "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/** Anything else is data, never a document: nothing may load from it or frame it. */
export const API_CSP = "default-src 'none'; frame-ancestors 'none'";

const CORS_METHODS = 'GET, POST, PUT, PATCH, DELETE, OPTIONS';
/** What a browser client of the API sends beyond the CORS-safelisted headers. */
const CORS_REQUEST_HEADERS = [
  'authorization',
  'content-type',
  'last-event-id',
  'x-cairn-session-id',
  'x-cairn-user',
  'mcp-protocol-version',
  'mcp-session-id',
].join(', ');
/** Response headers a listed origin's script may read. */
const CORS_EXPOSED_HEADERS = ['retry-after', 'x-cairn-session-id', 'mcp-session-id'].join(', ');
const PREFLIGHT_MAX_AGE_S = 600;

/** The host name of a `Host` header or URL host: lower case, no port, no trailing dot, IPv6 bracketed. */
export function hostName(host: string): string | undefined {
  const value = host.trim().toLowerCase();
  if (value === '') return undefined;
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    return end < 0 ? undefined : value.slice(0, end + 1);
  }
  // A bare IPv6 address (as in server.host "::1") has several colons and no port.
  if (value.split(':').length > 2) return `[${value}]`;
  const name = value.split(':')[0]!.replace(/\.$/, '');
  return name === '' ? undefined : name;
}

function isWildcardBind(host: string): boolean {
  return host === '0.0.0.0' || host === '::' || host === '[::]';
}

/**
 * The host names the server answers to: loopback, the bind address (every
 * local interface's address when it binds all of them), the host of
 * `publicUrl`, and `extra` (`server.allowedHosts`).
 */
export function defaultAllowedHosts(server: {
  host: string;
  publicUrl: string | null;
  allowedHosts: readonly string[];
}): string[] {
  const names = new Set(['localhost', '127.0.0.1', '[::1]']);
  const add = (host: string | undefined): void => {
    const name = host === undefined ? undefined : hostName(host);
    if (name !== undefined) names.add(name);
  };
  if (isWildcardBind(server.host)) {
    for (const addresses of Object.values(networkInterfaces()))
      for (const address of addresses ?? []) add(address.address);
  } else add(server.host);
  if (server.publicUrl !== null) add(new URL(server.publicUrl).host);
  for (const extra of server.allowedHosts)
    names.add(extra.startsWith('.') ? extra.toLowerCase() : (hostName(extra) ?? extra));
  return [...names];
}

/** True when `host` (a `Host` header) names one of `allowed`. */
export function isHostAllowed(host: string | undefined, allowed: readonly string[]): boolean {
  const name = host === undefined ? undefined : hostName(host);
  if (name === undefined) return false;
  return allowed.some((entry) =>
    entry.startsWith('.') ? name.endsWith(entry) || name === entry.slice(1) : name === entry,
  );
}

/** The port of a `Host` header, or undefined when it names none. */
function portOf(host: string): string | undefined {
  const value = host.trim();
  const afterName = value.startsWith('[') ? value.slice(value.indexOf(']') + 1) : value;
  const parts = afterName.split(':');
  return parts.length === 2 && parts[1] !== '' ? parts[1] : undefined;
}

/** `scheme://host:port` with the scheme's default port made explicit, or undefined when not an http(s) origin. */
function originKey(origin: string): string | undefined {
  try {
    const url = new URL(origin);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
    const port = url.port || (url.protocol === 'https:' ? '443' : '80');
    return `${url.protocol}//${url.hostname}:${port}`;
  } catch {
    return undefined;
  }
}

/**
 * True when the page's origin names the host and port the request was sent
 * to: the console calling its own server. The scheme is not compared (a TLS
 * proxy in front changes it; `Host` was already checked).
 */
function isOwnOrigin(origin: string, host: string): boolean {
  const key = originKey(origin);
  if (key === undefined) return false;
  const url = new URL(key);
  const defaultPort = url.protocol === 'https:' ? '443' : '80';
  return (
    hostName(url.host) === hostName(host) &&
    (url.port || defaultPort) === (portOf(host) ?? defaultPort)
  );
}

/** Normalises `server.corsOrigins` entries (`https://app.example`, no path) for comparison. */
export function corsOriginKeys(origins: readonly string[]): Set<string> {
  const keys = new Set<string>();
  for (const origin of origins) {
    const key = originKey(origin);
    if (key !== undefined) keys.add(key);
  }
  return keys;
}

/**
 * Set on the raw response, so they also reach responses written past fastify
 * (server-sent event streams, the MCP transport); a header a route sets
 * itself (Swagger UI's own CSP) still takes precedence.
 */
function setSecurityHeaders(reply: FastifyReply, isConsolePage: boolean): void {
  const raw = reply.raw;
  raw.setHeader('x-content-type-options', 'nosniff');
  raw.setHeader('referrer-policy', 'no-referrer');
  raw.setHeader('x-frame-options', 'DENY');
  raw.setHeader('content-security-policy', isConsolePage ? CONSOLE_CSP : API_CSP);
  raw.setHeader('vary', 'Origin');
}

function allowCors(reply: FastifyReply, origin: string): void {
  reply.raw.setHeader('access-control-allow-origin', origin);
  reply.raw.setHeader('access-control-expose-headers', CORS_EXPOSED_HEADERS);
}

function isPreflight(request: FastifyRequest): boolean {
  return (
    request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined
  );
}

/**
 * Adds the host, origin and header checks as the first hook of every request
 * (before authentication, rate limits and routing decisions).
 */
export function registerBrowserGuard(
  app: FastifyInstance,
  policy: BrowserPolicy,
  isConsolePath: (path: string) => boolean,
): void {
  const corsKeys = corsOriginKeys(policy.corsOrigins);
  const publicKey = policy.publicOrigin === null ? undefined : originKey(policy.publicOrigin);
  app.addHook('onRequest', async (request, reply) => {
    setSecurityHeaders(reply, isConsolePath(request.url.split('?')[0] ?? ''));
    const host = request.headers.host;
    if (!isHostAllowed(host, policy.allowedHosts)) {
      throw new CairnError(
        'HOST_NOT_ALLOWED',
        `This server does not answer to the host "${hostName(host ?? '') ?? ''}". Call it by an allowed name, or add the name to server.allowedHosts (or set server.publicUrl).`,
      );
    }
    const origin = request.headers.origin;
    if (origin === undefined) return;
    const key = originKey(origin);
    if (isOwnOrigin(origin, host!) || (key !== undefined && key === publicKey)) return;
    if (key === undefined || !corsKeys.has(key)) {
      throw new CairnError(
        'ORIGIN_NOT_ALLOWED',
        `Requests from the web origin "${origin.slice(0, 200)}" are not allowed. To let a page on that origin call Cairn, list it in server.corsOrigins.`,
      );
    }
    allowCors(reply, origin);
    if (isPreflight(request)) {
      void reply
        .code(204)
        .header('access-control-allow-methods', CORS_METHODS)
        .header('access-control-allow-headers', CORS_REQUEST_HEADERS)
        .header('access-control-max-age', String(PREFLIGHT_MAX_AGE_S))
        .send();
      return reply;
    }
  });
}
