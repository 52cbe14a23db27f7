/** The key form's fields as the body of POST /keys, and how a key's limits read. */
import type { ClientKey } from './types';

export interface KeyForm {
  name: string;
  /** Comma-separated agent names; empty or `*` for every agent. */
  agents: string;
  requestsPerMinute: string;
  tokensPerDay: string;
}

/** The POST /keys body for `form` (blank limits are left out; the server validates the rest). */
export function keyBody(form: KeyForm): {
  name: string;
  agents: '*' | string[];
  limits: ClientKey['limits'];
} {
  const names = form.agents
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const limit = (text: string) => (text.trim() === '' ? undefined : Number(text.trim()));
  const requestsPerMinute = limit(form.requestsPerMinute);
  const tokensPerDay = limit(form.tokensPerDay);
  return {
    name: form.name.trim(),
    agents: names.length === 0 || names.includes('*') ? '*' : names,
    limits: {
      ...(requestsPerMinute !== undefined ? { requestsPerMinute } : {}),
      ...(tokensPerDay !== undefined ? { tokensPerDay } : {}),
    },
  };
}

export function limitsText(limits: ClientKey['limits']): string {
  const parts = [
    limits.requestsPerMinute !== undefined ? `${limits.requestsPerMinute} requests/min` : '',
    limits.tokensPerDay !== undefined ? `${limits.tokensPerDay} tokens/day` : '',
  ].filter(Boolean);
  return parts.length > 0 ? parts.join(', ') : 'no limits';
}

/** What a key spent: its sessions' cost, and its tokens of the day. */
export function spentText(key: Pick<ClientKey, 'cost' | 'tokens_today'>): string {
  return `cost ${key.cost}, ${key.tokens_today} tokens today`;
}
