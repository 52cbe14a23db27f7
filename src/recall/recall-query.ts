/**
 * What automatic recall searches for, and how well a found message matches.
 * Pure: no I/O, no clock.
 *
 * The query is built from the newest user message (plus, inside a tool loop,
 * the latest tool result) so that a short or chatty message does not turn
 * into a search for everything:
 * - words are folded (lower case, accents removed) and split the way both
 *   full-text indexes split them (letters, digits, underscore);
 * - stop words of the common European languages are dropped, and so are
 *   acknowledgements ("ok", "thanks", "continue"): a message made only of
 *   them ("yes", "weiter") searches nothing and recalls nothing;
 * - one-letter words are dropped; numbers and ids are kept (they are what a
 *   summary loses first);
 * - a word matches any word of the same Porter stem (store/stem.ts, what the
 *   SQLite index stores), so "servers" finds "server" and "deploying"
 *   finds "deployed"; no term is a prefix, so a search reads each word's
 *   own list in the index, never every word that starts like it;
 * - at most MAX_QUERY_TERMS distinct terms, the user's first.
 * A message in another language than the history shares no terms with it and
 * recalls nothing; that is the honest answer of a keyword search.
 */

import { matchesTerm, wordsOf } from '../store/records.js';
import type { RecallPeriod } from '../store/store.js';
import { stemOf } from '../store/stem.js';

/** Terms of one recall query, at most. */
export const MAX_QUERY_TERMS = 24;
/** Of those, at most this many come from a tool result (tool output is long and noisy). */
export const MAX_TOOL_RESULT_TERMS = 12;
/** A message matching this many of the query's terms scores 1. */
export const FULL_MATCH_TERMS = 4;

/** One query term: `text` is folded; it matches words of the same stem (`prefix` is never set here). */
export interface RecallTerm {
  text: string;
  prefix: boolean;
}

// Stop words of English, German, French, Spanish, Italian, Portuguese and
// Dutch, folded like query words, plus chat acknowledgements.
const STOP_WORDS = new Set(
  `a about above after again against all also am an and any are as at be because been before
  being below between both but by can could did do does doing done down during each few for from
  further had has have having he her here hers herself him himself his how i if in into is it its
  itself just let me more most my myself no nor not now of off on once only or other our ours
  ourselves out over own same she should so some such than that the their theirs them themselves
  then there these they this those through to too under until up very was we were what when where
  which while who whom why will with would you your yours yourself yourselves ok okay yes yeah yep
  nope thanks thank please sure fine great good cool nice continue go on next hi hello hey tell
  know think want need like get got make use used using one two much many thing things something
  anything please pls thx
  der die das den dem des ein eine einer eines einem einen und oder aber ist sind war waren bin
  bist hat habe haben ich du er sie es wir ihr mit von zu zum zur im in auf fur an als auch nicht
  noch nur wie was wer wo wann warum ja nein bitte danke weiter gut so dass wenn dann mir mich dir
  dich uns euch sein seine ihre
  le la les un une des du de et ou mais est sont etait je tu il elle nous vous ils elles avec pour
  dans sur par pas plus que qui quoi ou quand comment oui non merci continuer bien ce cette ces mon
  ma mes ton ta tes son sa ses au aux
  el los las uno una unos unas y o pero es son era yo tu ella nosotros con para en por mas que
  quien como cuando donde si gracias seguir bien este esta estos estas mi mis su sus lo al del
  il lo gli uno una e o ma sono era io lui lei noi voi loro con per su piu che chi come quando
  dove si grazie continua bene questo questa mio mia suo sua nel della dei delle
  o os as um uma e ou mas sao era eu ele ela nos com para em por mais que quem como quando onde
  sim nao obrigado obrigada continuar bem este esta meu minha seu sua do da dos das no na
  de het een en of maar is zijn was ik jij hij zij wij met voor op aan als ook niet nog wat wie
  waar wanneer waarom ja nee dank bedankt verder goed dit dat mijn`
    .split(/\s+/)
    .filter((word) => word !== ''),
);

/** Whether recall never searches `word` (folded): a stop word or an acknowledgement. */
export function isStopWord(word: string): boolean {
  return STOP_WORDS.has(word);
}

function termOf(word: string): RecallTerm | undefined {
  if (word.length < 2 || STOP_WORDS.has(word)) return undefined;
  return { text: word, prefix: false };
}

function termsOf(text: string, limit: number, seen: Set<string>): RecallTerm[] {
  const out: RecallTerm[] = [];
  for (const word of wordsOf(text)) {
    if (out.length >= limit) break;
    const term = termOf(word);
    if (!term) continue;
    const stem = stemOf(term.text);
    if (seen.has(stem)) continue;
    seen.add(stem);
    out.push(term);
  }
  return out;
}

/** At most this many terms come from that earlier message. */
export const MAX_PREVIOUS_TERMS = 8;
// "and the other one?", "what about the second?", "same for Berlin?": a
// message that leans on the one before it.
const ANAPHORIC =
  /^\s*(and|but|also|what about|how about|the other|that one|same for)\b|\b(the other one|that one|the same one)\s*\??\s*$/i;

/**
 * Whether `userText` is a follow-up: it leans on the message before ("and
 * the other one?", "what about Berlin?"). A question of its own ("What time
 * is it?") or a message of acknowledgements only ("ok, thanks") is none.
 */
export function isFollowUp(userText: string): boolean {
  return ANAPHORIC.test(userText);
}

/**
 * The query terms of the newest user message, then, for a follow-up
 * (isFollowUp), the user message before it, and inside a tool loop the
 * latest tool result.
 */
export function recallTerms(
  userText: string,
  toolResult?: string,
  previousUser?: string,
): RecallTerm[] {
  const seen = new Set<string>();
  const terms = termsOf(userText, MAX_QUERY_TERMS, seen);
  if (previousUser !== undefined && isFollowUp(userText)) {
    const room = Math.min(MAX_PREVIOUS_TERMS, MAX_QUERY_TERMS - terms.length);
    terms.push(...termsOf(previousUser, room, seen));
  }
  if (toolResult !== undefined && terms.length < MAX_QUERY_TERMS) {
    const room = Math.min(MAX_TOOL_RESULT_TERMS, MAX_QUERY_TERMS - terms.length);
    terms.push(...termsOf(toolResult, room, seen));
  }
  return terms;
}

/**
 * How well `content` matches the query, from 0 to 1: the number of distinct
 * query terms it contains, over FULL_MATCH_TERMS (or over the number of terms,
 * for a shorter query). The same on both store dialects, whatever their rank.
 */
export function recallScore(terms: readonly RecallTerm[], content: string): number {
  if (terms.length === 0) return 0;
  const words = new Set(wordsOf(content));
  let found = 0;
  for (const term of terms) {
    for (const word of words) {
      if (matchesTerm(term, word)) {
        found += 1;
        break;
      }
    }
  }
  return Math.min(1, found / Math.min(terms.length, FULL_MATCH_TERMS));
}

// "the path is in my next message", "see below", "the list:": the message
// that answers comes right after this one.
const REFERS_TO_NEXT =
  /\b(next|following) (message|one)\b|\b(see|is|are) below\b|\bin (a|my|the) (next|following)\b|:\s*$/i;

/** Whether a message says that what it announces is in the message after it. */
export function refersToNext(text: string): boolean {
  return REFERS_TO_NEXT.test(text);
}

// "that was the address of the warehouse", "this is the key for the vault",
// "the above is the path": the message completes the one before it.
const REFERS_BACK = /^\W*(that|this|those|these)('s| was| is| were| are)\b|\b(the|see) above\b/i;

/** A message's own words, without an imported `[time] speaker:` label. */
function bodyOf(text: string): string {
  return text.replace(/^\[[^\]]*\]\s*[^:]{1,40}:\s*/, '');
}

/** Whether a message says what the speaker's previous message was ("that was the address of …"). */
export function refersBack(text: string): boolean {
  return REFERS_BACK.test(bodyOf(text));
}

/** Whether a message asks something: a sentence of it ends in a question mark. */
export function asksQuestion(text: string): boolean {
  return /\?(\s|$)/.test(bodyOf(text));
}

/** A message this short may be the bare answer an earlier one announced ("/srv/data/…"). */
export const SHORT_ANSWER_CHARS = 80;

/** Whether a message may complete the one before it: it refers back, or it is a short bare answer. */
export function mayCompleteEarlier(text: string): boolean {
  return refersBack(text) || bodyOf(text).trim().length <= SHORT_ANSWER_CHARS;
}

const MONTHS = [
  'january',
  'february',
  'march',
  'april',
  'may',
  'june',
  'july',
  'august',
  'september',
  'october',
  'november',
  'december',
];
const MONTH = `(${MONTHS.join('|')}|${MONTHS.map((m) => m.slice(0, 3)).join('|')})\\.?`;
const DAY = '(\\d{1,2})(?:st|nd|rd|th)?';
const YEAR = '(\\d{4})';
const DAY_MONTH_YEAR = new RegExp(`\\b${DAY}(?: of)? ${MONTH},? ${YEAR}\\b`, 'i');
const MONTH_DAY_YEAR = new RegExp(`\\b${MONTH} ${DAY},? ${YEAR}\\b`, 'i');
const ISO_DAY = /\b(\d{4})-(\d{2})-(\d{2})\b/;
const MONTH_YEAR = new RegExp(`\\b${MONTH},? ${YEAR}\\b`, 'i');
const IN_YEAR = /\b(?:in|during|of|throughout) (\d{4})\b/i;
const DAY_MS = 86_400_000;

function monthIndex(name: string): number {
  return MONTHS.findIndex((month) => month.startsWith(name.toLowerCase().slice(0, 3)));
}

/** A calendar day as a period, if it is one ("February 30" is none). */
function dayPeriod(year: number, month: number, day: number): RecallPeriod | undefined {
  const from = Date.UTC(year, month, day);
  if (month < 0 || new Date(from).getUTCDate() !== day) return undefined;
  return { from, to: from + DAY_MS };
}

/** The period a message names, and the message without the words that name it. */
export interface TimeScope {
  period: RecallPeriod;
  /** The message with the date taken out: its words are what to search for. */
  rest: string;
}

/**
 * The day, month or year `text` names, the first it names, if any: "on 13
 * October 2023", "October 13, 2023", "2023-10-13", "in July 2022", "in
 * 2023" (English month names, whole or three letters). A year alone counts
 * only after "in", "during", "of" or "throughout": a bare four-digit number is
 * as often an amount or an id. Days are UTC days; a relative time ("last
 * week") names none.
 */
export function timeScopeOf(text: string): TimeScope | undefined {
  const found = (m: RegExpExecArray, period: RecallPeriod | undefined): TimeScope | undefined =>
    period && { period, rest: `${text.slice(0, m.index)} ${text.slice(m.index + m[0].length)}` };
  let m = DAY_MONTH_YEAR.exec(text);
  if (m) return found(m, dayPeriod(Number(m[3]), monthIndex(m[2]!), Number(m[1])));
  m = MONTH_DAY_YEAR.exec(text);
  if (m) return found(m, dayPeriod(Number(m[3]), monthIndex(m[1]!), Number(m[2])));
  m = ISO_DAY.exec(text);
  if (m) return found(m, dayPeriod(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
  m = MONTH_YEAR.exec(text);
  if (m) {
    const year = Number(m[2]);
    const month = monthIndex(m[1]!);
    return found(m, { from: Date.UTC(year, month, 1), to: Date.UTC(year, month + 1, 1) });
  }
  m = IN_YEAR.exec(text);
  if (m) {
    const year = Number(m[1]);
    return found(m, { from: Date.UTC(year, 0, 1), to: Date.UTC(year + 1, 0, 1) });
  }
  return undefined;
}
