/** The keys page: the form's body for POST /keys, the secret shown once, the table without secrets. */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { keyBody, limitsText, spentText } from '../src/lib/keys';
import type { ClientKey } from '../src/lib/types';
import { IssuedSecret, KeyTable } from '../src/views/KeysView';

const KEY: ClientKey = {
  id: 'key_0123456789abcdef01234567',
  name: 'chat ui',
  agents: ['assistant'],
  limits: { requestsPerMinute: 60 },
  created_at: '2026-01-01T00:00:00.000Z',
  last_used_at: null,
  revoked_at: null,
  cost: 0.4182,
  tokens_today: 51230,
};

describe('the key form', () => {
  it('sends every agent for an empty or "*" list, and only the limits that were filled in', () => {
    const form = { name: ' ui ', agents: '', requestsPerMinute: '', tokensPerDay: '' };
    expect(keyBody(form)).toEqual({ name: 'ui', agents: '*', limits: {} });
    expect(keyBody({ ...form, agents: '*' }).agents).toBe('*');
    expect(
      keyBody({
        ...form,
        agents: 'assistant, planner,',
        requestsPerMinute: '30',
        tokensPerDay: '9',
      }),
    ).toEqual({
      name: 'ui',
      agents: ['assistant', 'planner'],
      limits: { requestsPerMinute: 30, tokensPerDay: 9 },
    });
  });

  it('describes limits in words', () => {
    expect(limitsText({})).toBe('no limits');
    expect(limitsText({ requestsPerMinute: 5, tokensPerDay: 100 })).toBe(
      '5 requests/min, 100 tokens/day',
    );
  });

  it('describes what a key spent: its cost and its tokens of the day', () => {
    expect(spentText({ cost: 0, tokens_today: 0 })).toBe('cost 0, 0 tokens today');
    expect(spentText({ cost: 1.25, tokens_today: 300 })).toBe('cost 1.25, 300 tokens today');
  });
});

describe('the keys page', () => {
  it('shows a new secret once, saying it is not shown again', () => {
    const html = renderToString(
      <IssuedSecret issued={{ key: KEY, secret: 'cairn_sk_abc' }} onDone={() => undefined} />,
    );
    expect(html).toContain('cairn_sk_abc');
    expect(html).toContain('not shown');
  });

  it('lists keys with their agents, limits, spend and state, and offers revoke only while live', () => {
    const html = renderToString(
      <KeyTable
        keys={[KEY, { ...KEY, id: 'key_revoked', revoked_at: '2026-01-02T00:00:00.000Z' }]}
        onRevoke={() => undefined}
      />,
    );
    expect(html).toContain('key_0123456789abcdef01234567');
    expect(html).toContain('60 requests/min');
    expect(html).toContain('cost 0.4182, 51230 tokens today');
    expect(html.match(/>Revoke</g)).toHaveLength(1);
    expect(html).toContain('revoked');
    expect(html).not.toContain('cairn_sk_');
  });

  it('names every column, the revoke one too', () => {
    const html = renderToString(<KeyTable keys={[KEY]} onRevoke={() => undefined} />);
    const headers = [...html.matchAll(/<th[^>]*>(.*?)<\/th>|<th[^>]*\/>/g)].map((m) => m[1] ?? '');
    expect(headers).toHaveLength(7);
    for (const header of headers) expect(header.trim()).not.toBe('');
    expect(headers.at(-1)).toBe('Status');
    expect(html).toContain('<td>active <button');
  });
});
