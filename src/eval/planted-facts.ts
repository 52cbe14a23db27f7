/**
 * The compaction eval's conversation: a deterministic generator (same seed,
 * same conversation) of chat turns that plant facts in four categories,
 * filler between them, the points where a compaction is forced, and one
 * probe per fact that asks about it by its cue, never by its answer.
 *
 * - plain: "the door code of the marina is 4812";
 * - updated: stated early, changed later; the newest value must win;
 * - instruction: a standing instruction to keep following ("whenever we talk
 *   about the bakery, end your reply with the tag TULIP-88");
 * - decision: a choice and its reason ("for the hangar we chose steel").
 * Every fact has its own place name, so a probe is about one fact only.
 * Each fact is also asked by a paraphrase: the same question in other words
 * (only the place is the same), as a person asks who does not remember how
 * the fact was put; it draws nothing from the seed, so a seed's
 * conversation is what it was before paraphrases.
 */

export type FactCategory = 'plain' | 'updated' | 'instruction' | 'decision';
export const FACT_CATEGORIES: readonly FactCategory[] = [
  'plain',
  'updated',
  'instruction',
  'decision',
];

export interface PlantedFact {
  id: string;
  category: FactCategory;
  /** The user message that states the fact (for `updated`: the first, stale value). */
  statement: string;
  /** For `updated`: the later message that changes it. */
  update?: string;
  /** The place the fact is about (each fact has its own). */
  place: string;
  /** What a request or an answer must contain for the fact to count as present. */
  answer: string;
  /** For `updated`: the value that no longer holds. */
  stale?: string;
  /** The probe: asks about the fact by its cue. */
  probe: string;
  /** The same question in other words: only the place is shared with the statement. */
  paraphrase: string;
}

export interface EvalTurn {
  user: string;
  /** A fact this turn states or updates (its id). */
  plants?: string;
  /** Force a compaction after this turn. */
  compactAfter: boolean;
}

export interface EvalConversation {
  facts: PlantedFact[];
  turns: EvalTurn[];
  /** An unrelated question: should recall nothing, or next to nothing. */
  unrelated: string;
}

const PLACES = `marina bakery hangar vineyard lighthouse greenhouse brewery chapel pharmacy museum
  stadium orchard quarry monastery ranch kiosk theatre depot harbor farmhouse workshop boathouse
  cottage villa penthouse bunker hostel arcade gallery foundry sawmill dairy bistro pavilion
  aquarium campsite observatory warehouse garage studio clinic library cabin gym office school
  chalet granary smithy tannery`
  .split(/\s+/)
  .filter((p) => p !== '');

const ATTRIBUTES = ['door code', 'alarm pin', 'locker number', 'gate code', 'safe combination'];
/** Each attribute asked in other words (the place goes where `%` is). */
const PARAPHRASED: Record<string, string> = {
  'door code': 'Which digits let me in at the entrance of the %?',
  'alarm pin': 'What do I type to silence the siren in the %?',
  'locker number': 'Where at the % do I keep my things, which cupboard?',
  'gate code': 'How do I get through the fence around the %, what digits?',
  'safe combination': 'Which digits open the strongbox in the %?',
};
const NAMES =
  `Mirela Hask, Tobin Orr, Ysolde Brand, Kaspar Lind, Noor Vale, Ilse Ferro, Dario Quint,
  Aino Sepp, Rafe Tamm, Odile Marsh`
    .split(',')
    .map((n) => n.trim());
const MATERIALS = ['steel', 'cedar', 'granite', 'bamboo', 'copper', 'basalt', 'walnut', 'slate'];
const TAGS = ['TULIP', 'ORBIT', 'MAPLE', 'COMET', 'RAVEN', 'DELTA', 'FJORD', 'AMBER'];

const FILLER = [
  'The weather was mild this morning, so I walked along the river before breakfast.',
  'I finally finished that novel about the sailors; the ending surprised me.',
  'Lunch was a simple soup with bread, nothing special but warm.',
  'My neighbour is repainting her fence a pale green colour this week.',
  'I have been trying to sleep earlier, with mixed results so far.',
  'The train was late again, so I listened to a podcast about volcanoes.',
  'We watched a documentary about owls last night; they hunt in silence.',
  'I started learning a few chords on the guitar, slowly.',
  'The market had excellent tomatoes and some strange purple carrots.',
  'My cousin sent photos from her holiday in the mountains.',
];

/** mulberry32: a small seeded generator, so a seed always gives the same conversation. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)]!;
}

/** One of `items` other than `not`. */
function pickOther<T>(random: () => number, items: readonly T[], not: T): T {
  return pick(
    random,
    items.filter((item) => item !== not),
  );
}

function digits(random: () => number): string {
  return String(1000 + Math.floor(random() * 9000));
}

function makeFact(index: number, category: FactCategory, random: () => number): PlantedFact {
  const place = PLACES[index % PLACES.length]!;
  const id = `F${String(index + 1).padStart(2, '0')}`;
  const fact = { id, category, place };
  switch (category) {
    case 'plain': {
      const attribute = pick(random, ATTRIBUTES);
      const value = digits(random);
      return {
        ...fact,
        statement: `By the way, the ${attribute} of the ${place} is ${value}.`,
        answer: value,
        probe: `What is the ${attribute} of the ${place}?`,
        paraphrase: PARAPHRASED[attribute]!.replace('%', place),
      };
    }
    case 'updated': {
      const old = pick(random, NAMES);
      const current = pickOther(random, NAMES, old);
      return {
        ...fact,
        statement: `The caretaker of the ${place} is ${old}.`,
        update: `Change of plan: the caretaker of the ${place} is now ${current}, not ${old} any more.`,
        answer: current,
        stale: old,
        probe: `Who is the caretaker of the ${place}?`,
        paraphrase: `Who looks after the ${place} these days?`,
      };
    }
    case 'instruction': {
      const tag = `${pick(random, TAGS)}-${digits(random).slice(0, 2)}`;
      return {
        ...fact,
        statement: `Standing instruction: whenever we discuss the ${place}, end your reply with the tag ${tag}.`,
        answer: tag,
        probe: `Let us discuss the ${place} for a moment.`,
        paraphrase: `A quick thought about the ${place}, if you have time.`,
      };
    }
    case 'decision': {
      const chosen = pick(random, MATERIALS);
      const rejected = pickOther(random, MATERIALS, chosen);
      return {
        ...fact,
        statement: `Decision: for the roof of the ${place} we chose ${chosen} over ${rejected}, because it lasts longer.`,
        answer: chosen,
        probe: `Which material did we choose for the roof of the ${place}?`,
        paraphrase: `What did we settle on to cover the top of the ${place}?`,
      };
    }
  }
}

/**
 * `factCount` facts (categories in turn), spread over `compactions` segments
 * with two filler turns each; a segment ends with a forced compaction. An
 * update lands two segments after its fact (or in the last one).
 */
export function generateConversation(input: {
  factCount: number;
  compactions: number;
  seed: number;
}): EvalConversation {
  const random = seededRandom(input.seed);
  const facts = Array.from({ length: input.factCount }, (_, i) =>
    makeFact(i, FACT_CATEGORIES[i % FACT_CATEGORIES.length]!, random),
  );
  const segments = Math.max(1, input.compactions);
  const perSegment: EvalTurn[][] = Array.from({ length: segments }, () => []);
  facts.forEach((fact, i) => {
    const segment = Math.floor((i * segments) / Math.max(1, facts.length));
    perSegment[segment]!.push({ user: fact.statement, plants: fact.id, compactAfter: false });
    if (fact.update) {
      const later = Math.min(segment + 2, segments - 1);
      perSegment[later]!.push({ user: fact.update, plants: fact.id, compactAfter: false });
    }
  });
  const turns: EvalTurn[] = [];
  for (const segment of perSegment) {
    const filler = (): EvalTurn => ({ user: pick(random, FILLER), compactAfter: false });
    const planted = segment.length > 0 ? segment : [];
    const block = [filler(), ...planted, filler()];
    block.at(-1)!.compactAfter = true;
    turns.push(...block);
  }
  return {
    facts,
    turns,
    unrelated: 'Can you recommend a good recipe for pancakes with blueberries?',
  };
}
