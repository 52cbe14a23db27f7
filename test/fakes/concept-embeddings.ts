/**
 * The fake provider's embeddings: a hashed bag of concepts. Each word is
 * folded (lower case, a plural or -ing/-ed ending dropped) and mapped through
 * a small synonym table to a concept, so paraphrases share concepts ("how
 * often do we change the deploy credentials?" and "the deploy key rotates
 * every 90 days" share `change`, `deploy` and `secret`); every concept adds
 * ±1 at a dimension picked by a hash of the model name and the concept, and
 * the sum is scaled to unit length. Deterministic, different per model (a
 * model change really changes every vector), no dependency.
 */

const SYNONYMS: Record<string, string> = {};
function group(concept: string, words: string): void {
  for (const word of words.split(/\s+/)) if (word !== '') SYNONYMS[word] = concept;
}
group('change', 'change rotate rotation renew replace refresh swap cycle');
group('secret', 'credential key secret password token passphrase apikey');
group('deploy', 'deploy deployment release ship rollout publish');
group('container', 'kubernetes k8s container cluster pod orchestration helm');
group('platform', 'platform infrastructure infra');
group('often', 'often frequency every how-often interval period');
group('database', 'database postgres postgresql sqlite db mysql storage');
group('backup', 'backup snapshot dump restore');
group('food', 'pizza pasta lunch dinner food meal eat');
group('pet', 'dog cat pet puppy kitten');
group('travel', 'trip travel flight vacation holiday journey');
group('money', 'budget cost price money spend expense invoice');
group('meeting', 'meeting call standup sync appointment');

const STOP = new Set(
  'a an the do does did we you i it is are was were be to of in on for at by with and or how what when where which who why that this my our your their every day days'.split(
    ' ',
  ),
);

function fold(word: string): string {
  let w = word.toLowerCase();
  if (w.length > 4 && w.endsWith('ing')) w = w.slice(0, -3);
  else if (w.length > 4 && w.endsWith('ed')) w = w.slice(0, -2);
  else if (w.length > 4 && w.endsWith('es') && !w.endsWith('ses')) w = w.slice(0, -1);
  if (w.length > 3 && w.endsWith('s') && !w.endsWith('ss')) w = w.slice(0, -1);
  return w;
}

/** The concepts of `text`: synonyms mapped, other words kept as themselves. */
export function conceptsOf(text: string): string[] {
  const out: string[] = [];
  for (const raw of text.split(/[^\p{L}\p{N}]+/u)) {
    if (raw === '') continue;
    const lower = raw.toLowerCase();
    if (STOP.has(lower)) continue;
    const folded = fold(lower);
    out.push(SYNONYMS[lower] ?? SYNONYMS[folded] ?? folded);
  }
  return out;
}

function fnv(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** Dimensions of the fake's vectors when the request asks for none. */
export const FAKE_EMBED_DIMENSIONS = 64;

/** The fake's embedding of `text` by `model`: unit length (all zeros for a text with no concept). */
export function conceptEmbedding(
  text: string,
  model: string,
  dimensions = FAKE_EMBED_DIMENSIONS,
): number[] {
  const vector = new Array<number>(dimensions).fill(0);
  for (const concept of conceptsOf(text)) {
    const hash = fnv(`${model}\u0000${concept}`);
    vector[hash % dimensions]! += hash & 0x80000000 ? -1 : 1;
  }
  const norm = Math.sqrt(vector.reduce((sum, x) => sum + x * x, 0));
  return norm > 0 ? vector.map((x) => x / norm) : vector;
}
