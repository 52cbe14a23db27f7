/**
 * Client keys (admin only): the list, a form that creates one and shows its
 * secret once, and revoke. The secret lives in this view's state only, never
 * in storage: leaving the page forgets it.
 */
import { useState } from 'preact/hooks';
import { useApi, useLoad } from '../lib/hooks';
import { keyBody, limitsText, spentText, type KeyForm } from '../lib/keys';
import type { ClientKey } from '../lib/types';
import { ErrorNote } from './ErrorNote';

/** A key as POST /keys answers it: nothing spent yet, so no spend fields. */
type IssuedKey = Omit<ClientKey, 'cost' | 'tokens_today'>;

const EMPTY_FORM: KeyForm = { name: '', agents: '', requestsPerMinute: '', tokensPerDay: '' };

export function KeysView() {
  const api = useApi();
  const keys = useLoad(() => api.get<{ keys: ClientKey[] }>('/keys'), []);
  const [form, setForm] = useState<KeyForm>(EMPTY_FORM);
  const [issued, setIssued] = useState<{ key: IssuedKey; secret: string } | undefined>();
  const [error, setError] = useState<string | undefined>();
  const field = (name: keyof KeyForm) => ({
    value: form[name],
    onInput: (e: Event) =>
      setForm({ ...form, [name]: (e.currentTarget as HTMLInputElement).value }),
  });

  const create = async (e: Event) => {
    e.preventDefault();
    try {
      setIssued(await api.post<{ key: IssuedKey; secret: string }>('/keys', keyBody(form)));
      setForm(EMPTY_FORM);
      setError(undefined);
      keys.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  const revoke = async (key: ClientKey) => {
    if (!confirm(`Revoke "${key.name}"? Clients using it are refused from their next request.`))
      return;
    try {
      await api.request('DELETE', `/keys/${encodeURIComponent(key.id)}`);
      keys.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };

  if (keys.error !== undefined && keys.data === undefined) {
    return (
      <section class="main wide" aria-labelledby="keys-title">
        <h2 id="keys-title">Keys</h2>
        <ErrorNote error={keys.error} />
      </section>
    );
  }
  return (
    <section class="main wide" aria-labelledby="keys-title">
      <h2 id="keys-title">Keys</h2>
      <ErrorNote error={error} />
      {issued && <IssuedSecret issued={issued} onDone={() => setIssued(undefined)} />}
      <form class="key-form" onSubmit={(e) => void create(e)} aria-label="New client key">
        <label>
          Name <input required {...field('name')} />
        </label>
        <label>
          Agents (comma-separated, empty for all) <input {...field('agents')} />
        </label>
        <label>
          Requests per minute <input inputMode="numeric" {...field('requestsPerMinute')} />
        </label>
        <label>
          Tokens per day <input inputMode="numeric" {...field('tokensPerDay')} />
        </label>
        <button type="submit">Create key</button>
      </form>
      <KeyTable keys={keys.data?.keys ?? []} onRevoke={(key) => void revoke(key)} />
    </section>
  );
}

/** The new key's secret, shown this once, until the admin says it is copied. */
export function IssuedSecret(props: {
  issued: { key: IssuedKey; secret: string };
  onDone: () => void;
}) {
  return (
    <div role="status" class="issued-secret">
      <p>
        Key <strong>{props.issued.key.name}</strong> created. Copy its secret now: it is not shown
        again, and the server keeps only its hash.
      </p>
      <output>
        <code>{props.issued.secret}</code>
      </output>{' '}
      <button type="button" onClick={props.onDone}>
        I have copied it
      </button>
    </div>
  );
}

export function KeyTable(props: { keys: ClientKey[]; onRevoke: (key: ClientKey) => void }) {
  if (props.keys.length === 0) return <p>No client keys yet.</p>;
  return (
    <table class="keys">
      <thead>
        <tr>
          <th>Name</th>
          <th>Id</th>
          <th>Agents</th>
          <th>Limits</th>
          <th>Spent</th>
          <th>Last used</th>
          <th>Status</th>
        </tr>
      </thead>
      <tbody>
        {props.keys.map((key) => (
          <tr key={key.id} class={key.revoked_at ? 'revoked' : undefined}>
            <td>{key.name}</td>
            <td>
              <code>{key.id}</code>
            </td>
            <td>{key.agents === '*' ? 'all' : key.agents.join(', ')}</td>
            <td>{limitsText(key.limits)}</td>
            <td>{spentText(key)}</td>
            <td>{key.last_used_at ? new Date(key.last_used_at).toLocaleString() : 'never'}</td>
            <td>
              {key.revoked_at ? (
                `revoked ${new Date(key.revoked_at).toLocaleString()}`
              ) : (
                <>
                  active{' '}
                  <button type="button" onClick={() => props.onRevoke(key)}>
                    Revoke
                  </button>
                </>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
