/**
 * The Porter stemmer (M. F. Porter, 1980, the original algorithm), the one
 * SQLite's FTS5 `porter` tokenizer applies to the history index (migration
 * 018): recall compares a query word and a stored word by their stems, so
 * "servers", "server" and "serving" meet, and the JS ranking counts the words
 * the index matched. Pure; only words of ASCII letters are stemmed (a number,
 * an id or another script is its own stem), as the tokenizer does.
 */

const VOWEL = /[aeiou]/;

function isConsonant(word: string, i: number): boolean {
  const c = word[i]!;
  if (VOWEL.test(c)) return false;
  if (c === 'y') return i === 0 || !isConsonant(word, i - 1);
  return true;
}

/** Porter's m: the number of vowel-consonant sequences in `stem`. */
function measure(stem: string): number {
  let m = 0;
  let i = 0;
  const n = stem.length;
  while (i < n && isConsonant(stem, i)) i++;
  while (i < n) {
    while (i < n && !isConsonant(stem, i)) i++;
    if (i >= n) break;
    while (i < n && isConsonant(stem, i)) i++;
    m++;
  }
  return m;
}

function hasVowel(stem: string): boolean {
  for (let i = 0; i < stem.length; i++) if (!isConsonant(stem, i)) return true;
  return false;
}

function endsDoubleConsonant(word: string): boolean {
  const n = word.length;
  return n >= 2 && word[n - 1] === word[n - 2] && isConsonant(word, n - 1);
}

/** Consonant-vowel-consonant at the end, the last not w, x or y. */
function endsCvc(word: string): boolean {
  const n = word.length;
  if (n < 3) return false;
  if (!isConsonant(word, n - 1) || isConsonant(word, n - 2) || !isConsonant(word, n - 3))
    return false;
  return !'wxy'.includes(word[n - 1]!);
}

/** The first rule whose suffix `word` ends with, applied when its stem's m is above `minM`. */
function replaceSuffix(
  word: string,
  rules: readonly (readonly [string, string])[],
  minM: number,
): string {
  for (const [suffix, replacement] of rules) {
    if (!word.endsWith(suffix)) continue;
    const stem = word.slice(0, -suffix.length);
    return measure(stem) > minM ? stem + replacement : word;
  }
  return word;
}

const STEP2: readonly (readonly [string, string])[] = [
  ['ational', 'ate'],
  ['tional', 'tion'],
  ['enci', 'ence'],
  ['anci', 'ance'],
  ['izer', 'ize'],
  ['bli', 'ble'],
  ['alli', 'al'],
  ['entli', 'ent'],
  ['eli', 'e'],
  ['ousli', 'ous'],
  ['ization', 'ize'],
  ['ation', 'ate'],
  ['ator', 'ate'],
  ['alism', 'al'],
  ['iveness', 'ive'],
  ['fulness', 'ful'],
  ['ousness', 'ous'],
  ['aliti', 'al'],
  ['iviti', 'ive'],
  ['biliti', 'ble'],
  ['logi', 'log'],
];
const STEP3: readonly (readonly [string, string])[] = [
  ['icate', 'ic'],
  ['ative', ''],
  ['alize', 'al'],
  ['iciti', 'ic'],
  ['ical', 'ic'],
  ['ful', ''],
  ['ness', ''],
];
const STEP4 = [
  'al',
  'ance',
  'ence',
  'er',
  'ic',
  'able',
  'ible',
  'ant',
  'ement',
  'ment',
  'ent',
  'ion',
  'ou',
  'ism',
  'ate',
  'iti',
  'ous',
  'ive',
  'ize',
];

/** Longest suffixes first, so `ement` wins over `ment` and `ent`. */
function longestFirst<T extends readonly [string, string] | string>(rules: readonly T[]): T[] {
  const key = (rule: T): string => (typeof rule === 'string' ? rule : rule[0]);
  return [...rules].sort((a, b) => key(b).length - key(a).length);
}
const STEP2_RULES = longestFirst(STEP2);
const STEP3_RULES = longestFirst(STEP3);
const STEP4_SUFFIXES = longestFirst(STEP4);

function step1ab(word: string): string {
  if (word.endsWith('sses')) word = word.slice(0, -2);
  else if (word.endsWith('ies')) word = word.slice(0, -2);
  else if (word.endsWith('ss')) {
    // unchanged
  } else if (word.endsWith('s')) word = word.slice(0, -1);

  if (word.endsWith('eed')) {
    return measure(word.slice(0, -3)) > 0 ? word.slice(0, -1) : word;
  }
  let stem: string | undefined;
  if (word.endsWith('ed') && hasVowel(word.slice(0, -2))) stem = word.slice(0, -2);
  else if (word.endsWith('ing') && hasVowel(word.slice(0, -3))) stem = word.slice(0, -3);
  if (stem === undefined) return word;
  if (stem.endsWith('at') || stem.endsWith('bl') || stem.endsWith('iz')) return `${stem}e`;
  if (endsDoubleConsonant(stem) && !'lsz'.includes(stem.at(-1)!)) return stem.slice(0, -1);
  if (measure(stem) === 1 && endsCvc(stem)) return `${stem}e`;
  return stem;
}

function step4(word: string): string {
  for (const suffix of STEP4_SUFFIXES) {
    if (!word.endsWith(suffix)) continue;
    const stem = word.slice(0, -suffix.length);
    if (measure(stem) <= 1) return word;
    if (suffix === 'ion' && !(stem.endsWith('s') || stem.endsWith('t'))) return word;
    return stem;
  }
  return word;
}

function step5(word: string): string {
  if (word.endsWith('e')) {
    const stem = word.slice(0, -1);
    const m = measure(stem);
    if (m > 1 || (m === 1 && !endsCvc(stem))) word = stem;
  }
  if (measure(word) > 1 && endsDoubleConsonant(word) && word.endsWith('l'))
    word = word.slice(0, -1);
  return word;
}

/** The Porter stem of a folded (lower-case) word; words of other characters or under three letters are their own stem. */
export function porterStem(word: string): string {
  if (word.length <= 2 || !/^[a-z]+$/.test(word)) return word;
  let w = step1ab(word);
  if (w.endsWith('y') && hasVowel(w.slice(0, -1))) w = `${w.slice(0, -1)}i`;
  w = replaceSuffix(w, STEP2_RULES, 0);
  w = replaceSuffix(w, STEP3_RULES, 0);
  w = step4(w);
  return step5(w);
}

const MEMO_MAX_WORDS = 20_000;
const memo = new Map<string, string>();

/** `porterStem`, remembered (the same words recur in every call's candidates). */
export function stemOf(word: string): string {
  let stem = memo.get(word);
  if (stem === undefined) {
    if (memo.size >= MEMO_MAX_WORDS) memo.clear();
    stem = porterStem(word);
    memo.set(word, stem);
  }
  return stem;
}

/**
 * What every word of `word`'s stem starts with, for an index that keeps
 * whole words (Postgres' 'simple' tsvector): the longest common start of
 * the word and its stem ("deploying" and "deploi": "deplo"). A search by it
 * finds a superset of the words of that stem; check them with `stemOf`.
 */
export function stemPrefix(word: string): string {
  const stem = stemOf(word);
  let n = 0;
  while (n < stem.length && n < word.length && stem[n] === word[n]) n++;
  return word.slice(0, Math.max(n, 1));
}
