/** Asks for the server's API key once; it is kept in this tab's session storage. */
import { useState } from 'preact/hooks';

export function KeyPrompt({
  wrong,
  onSubmit,
}: {
  wrong: boolean;
  onSubmit: (key: string) => void;
}) {
  const [key, setKey] = useState('');
  return (
    <main class="key-prompt">
      <h1>Cairn console</h1>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (key.trim() !== '') onSubmit(key.trim());
        }}
      >
        <p>This server needs an API key (CAIRN_API_KEY).</p>
        <label>
          API key
          <input
            type="password"
            autoComplete="current-password"
            value={key}
            onInput={(e) => setKey(e.currentTarget.value)}
            autoFocus
          />
        </label>
        {wrong && (
          <p role="alert" class="error">
            Wrong API key: the server refused it. Check CAIRN_API_KEY and try again.
          </p>
        )}
        <button type="submit">Unlock</button>
      </form>
    </main>
  );
}
