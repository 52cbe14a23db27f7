/**
 * Who a request is: the admin (the `server.apiKey` holder, or anyone when no
 * admin key is set), or a client key with the agents and limits it was given;
 * either may name an end user. Set once per request by the auth hook, read by
 * the ownership guard and the handlers that filter what they list.
 */
import type { FastifyRequest } from 'fastify';
import { CairnError } from '../errors.js';
import type { KeyRow, Owner } from '../store/store.js';

export type Principal =
  | { readonly kind: 'admin'; readonly user: string | null }
  | { readonly kind: 'client'; readonly key: KeyRow; readonly user: string | null };

/** The header a client names its end user with (on every route; `/v1` also reads `user`). */
export const END_USER_HEADER = 'x-cairn-user';
export const END_USER_MAX_CHARS = 200;

const principals = new WeakMap<FastifyRequest, Principal>();

export function setPrincipal(request: FastifyRequest, principal: Principal): void {
  principals.set(request, principal);
}

/** The request's principal; the admin when no auth hook ran (open paths). */
export function principalOf(request: FastifyRequest): Principal {
  return principals.get(request) ?? { kind: 'admin', user: null };
}

/**
 * The principal with `user` as its end user, when one is named (a /v1 body's
 * `user`). A request whose `X-Cairn-User` header names another end user is
 * 400: neither is silently preferred.
 */
export function withEndUser(principal: Principal, user: string | undefined): Principal {
  if (user === undefined) return principal;
  const named = checkEndUser(user, 'user');
  if (principal.user !== null && principal.user !== named) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `The X-Cairn-User header names the end user "${principal.user}" and the body's user (or safety_identifier) names "${named}". Name one end user: send the same in both, or only one of them.`,
    );
  }
  return { ...principal, user: named };
}

/** What a row created for `principal` records as its owner. */
export function ownerOf(principal: Principal): Owner {
  return { key: principal.kind === 'client' ? principal.key.id : null, user: principal.user };
}

/** The `by` of an audit event: which key (null: the admin) and end user did it. */
export function auditBy(principal: Principal): { key: string | null; user: string | null } {
  return ownerOf(principal);
}

/** True when `principal` may see a row owned by `ownerKey`: the admin sees all, a key its own. */
export function owns(principal: Principal, ownerKey: string | null): boolean {
  return principal.kind === 'admin' || ownerKey === principal.key.id;
}

/** True when `principal` may use the agent `name`. */
export function mayUseAgent(principal: Principal, name: string): boolean {
  if (principal.kind === 'admin') return true;
  const { agents } = principal.key;
  return agents === '*' || agents.includes(name);
}

/**
 * Invisible characters that make two names look the same or reorder how one
 * reads: zero-width spaces and joiners, bidirectional controls, the BOM, soft
 * hyphens (Unicode's format characters, Cf).
 */
const INVISIBLE = /\p{Cf}/u;

/**
 * An end user name, normalised (NFKC, so look-alike spellings of one name are
 * one name), or 400 when it cannot be one: empty, over END_USER_MAX_CHARS
 * characters (code points: an emoji is one), or holding control or invisible
 * characters.
 */
export function checkEndUser(value: string, where: string): string {
  const name = value.normalize('NFKC');
  const chars = [...name].length;
  // Printable text only: it is stored, listed and logged.
  if (chars === 0 || chars > END_USER_MAX_CHARS || /\p{Cc}/u.test(name)) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `${where} must be 1 to ${END_USER_MAX_CHARS} printable characters naming the end user.`,
    );
  }
  if (INVISIBLE.test(name)) {
    throw new CairnError(
      'VALIDATION_ERROR',
      `${where} holds an invisible character (zero-width or bidirectional control, U+${name
        .match(INVISIBLE)![0]
        .codePointAt(0)!
        .toString(16)
        .toUpperCase()
        .padStart(
          4,
          '0',
        )}): names that look alike must be one name. Send the end user's id without it.`,
    );
  }
  return name;
}

/**
 * The values of every `name` header the client sent, in order. Node joins a
 * repeated header into one "a, b" value in `headers`, which would pass as one
 * end user; the raw list keeps them apart.
 */
function sentHeaders(request: FastifyRequest, name: string): string[] {
  const raw = request.raw.rawHeaders;
  const values: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === name) values.push(raw[i + 1]!);
  }
  return values;
}

/** The end user a request names in its `X-Cairn-User` header, if any. */
export function endUserHeader(request: FastifyRequest): string | null {
  const values = sentHeaders(request, END_USER_HEADER);
  if (values.length === 0) return null;
  if (values.length > 1) {
    throw new CairnError('VALIDATION_ERROR', 'Send the X-Cairn-User header once.');
  }
  return checkEndUser(values[0]!, 'The X-Cairn-User header');
}
