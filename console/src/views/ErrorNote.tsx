/** A failed request, said plainly (the API's message says what to do). */
export function ErrorNote({ error }: { error: string | undefined }) {
  return error ? (
    <p role="alert" class="error">
      {error}
    </p>
  ) : null;
}
