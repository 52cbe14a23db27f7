/** Small wording helpers shared by the views. */

/** A stored timestamp in the reader's locale. */
export function formatTime(iso: string): string {
  return new Date(iso).toLocaleString();
}

export function plural(count: number, one: string, many = `${one}s`): string {
  return `${count.toLocaleString('en-US')} ${count === 1 ? one : many}`;
}
