/**
 * `cairn eval compaction`: drives a generated conversation with planted
 * facts through a real Cairn app (the chosen agent, model and settings),
 * forcing a rolling compaction at the end of each segment, then probes each
 * fact by its cue and again by a paraphrase (other words, same question) and
 * reports, per category: facts still in the raw tail when probed (trivially
 * present: nothing was compacted away), facts kept in the summary, facts
 * present in the model's request when probed (the summary, the raw tail or
 * automatic recall put it there) and those found only by recall (neither in
 * the tail nor in the summary), for each kind of probe; answers that contain
 * the fact (only with a real model: the offline one never answers),
 * compaction tokens, and prompt tokens per turn.
 */
import type { CairnApp } from '../app.js';
import type { ObservedCall } from '../llm/observed-model.js';
import {
  FACT_CATEGORIES,
  generateConversation,
  type EvalConversation,
  type FactCategory,
  type PlantedFact,
} from './planted-facts.js';

export interface CategoryReport {
  category: FactCategory | 'all';
  facts: number;
  /** Facts whose message was still in the raw tail (not compacted) when probed by cue. */
  inRawTail: number;
  keptInSummary: number;
  presentWhenProbed: number;
  /** Present when probed by cue, neither in the raw tail nor in the summary: recall brought it. */
  foundOnlyByRecall: number;
  /** Present when asked by the paraphrase. */
  presentWhenParaphrased: number;
  /** Present when asked by the paraphrase, neither in the raw tail nor in the summary. */
  foundOnlyByRecallParaphrased: number;
  /** null: not measured (the offline model does not answer). */
  answeredCorrectly: number | null;
}

export interface CompactionEvalReport {
  seed: number;
  agent: string;
  model: string;
  facts: number;
  /** Compactions that landed (asked for: one per segment). */
  compactions: number;
  categories: CategoryReport[];
  total: CategoryReport;
  compactionTokens: { input: number; output: number };
  promptTokensPerTurn: { mean: number; max: number };
  /** Compacted messages recalled for the unrelated question. */
  unrelatedRecalled: number;
  /** Model calls that failed (a provider rejecting a request counts here). */
  failedCalls: number;
  summaryChars: number;
}

export interface CompactionEvalInput {
  app: CairnApp;
  agentName: string;
  facts: number;
  compactions: number;
  seed: number;
  /** Every model call of the app, as the observer passed to `startApp` appends them. */
  calls: ObservedCall[];
  /** False for the offline model: answers are not scored. */
  scoreAnswers: boolean;
  onProgress?: (done: number, total: number) => void;
}

interface ChatReply {
  reply: string;
  usage: { input_tokens: number };
  recall: { seqs: number[] } | null;
}

/** An answer names the fact's value (case-insensitively). */
function contains(text: string, fact: PlantedFact): boolean {
  return text.toLowerCase().includes(fact.answer.toLowerCase());
}

/**
 * A text holds the fact when one of its lines names both the fact's place
 * and its value: values repeat across facts (names, materials), places do not.
 */
function holds(texts: readonly string[], fact: PlantedFact): boolean {
  const place = fact.place.toLowerCase();
  return texts.some((text) =>
    text
      .toLowerCase()
      .split('\n')
      .some((line) => line.includes(place) && line.includes(fact.answer.toLowerCase())),
  );
}

export async function runCompactionEval(input: CompactionEvalInput): Promise<CompactionEvalReport> {
  const { app, calls } = input;
  const conversation: EvalConversation = generateConversation({
    factCount: input.facts,
    compactions: input.compactions,
    seed: input.seed,
  });
  const total = conversation.turns.length + conversation.facts.length + 1;
  let done = 0;
  const step = (): void => input.onProgress?.(++done, total);

  const created = await app.server.inject({
    method: 'POST',
    url: '/sessions',
    payload: { agentName: input.agentName },
  });
  if (created.statusCode !== 201) throw new Error(`creating the session failed: ${created.body}`);
  const sessionId = created.json<{ session: { id: string } }>().session.id;
  const promptTokens: number[] = [];
  const chat = async (message: string): Promise<ChatReply> => {
    const res = await app.server.inject({
      method: 'POST',
      url: `/agents/${input.agentName}/chat`,
      payload: { message, sessionId },
    });
    if (res.statusCode !== 200) throw new Error(`a chat turn failed: ${res.body}`);
    const reply = res.json<ChatReply>();
    promptTokens.push(reply.usage.input_tokens);
    return reply;
  };

  let compactions = 0;
  for (const turn of conversation.turns) {
    await chat(turn.user);
    if (turn.compactAfter) {
      const res = await app.server.inject({
        method: 'POST',
        url: `/sessions/${sessionId}/compact`,
      });
      if (res.statusCode !== 200) throw new Error(`a compaction failed: ${res.body}`);
      if (res.json<{ alreadyUpToDate?: boolean }>().alreadyUpToDate !== true) compactions += 1;
    }
    step();
  }
  const summary = (await app.store.findSession(sessionId))?.compact_summary ?? '';

  const kept = new Set<string>();
  const inTail = new Set<string>();
  const present = new Set<string>();
  const recalledOnly = new Set<string>();
  const presentParaphrased = new Set<string>();
  const recalledOnlyParaphrased = new Set<string>();
  const answered = new Set<string>();
  /** The model requests' texts of one probe, and whether the fact's message is among them whole (the raw tail). */
  const probe = async (fact: PlantedFact, question: string) => {
    const from = calls.length;
    const reply = await chat(question);
    const texts = calls
      .slice(from)
      .filter((call) => call.request.purpose === 'chat')
      .flatMap((call) => call.request.messages.map((m) => m.content ?? ''));
    const said = fact.update ?? fact.statement;
    return { reply, present: holds(texts, fact), tail: texts.some((text) => text === said) };
  };
  for (const fact of conversation.facts) {
    if (holds([summary], fact)) kept.add(fact.id);
    const cue = await probe(fact, fact.probe);
    if (cue.tail) inTail.add(fact.id);
    if (cue.present) present.add(fact.id);
    if (cue.present && !cue.tail && !kept.has(fact.id)) recalledOnly.add(fact.id);
    if (contains(cue.reply.reply, fact)) answered.add(fact.id);
    const other = await probe(fact, fact.paraphrase);
    if (other.present) presentParaphrased.add(fact.id);
    if (other.present && !other.tail && !kept.has(fact.id)) recalledOnlyParaphrased.add(fact.id);
    step();
  }
  const unrelated = await chat(conversation.unrelated);
  step();

  const session = await app.store.findSession(sessionId);
  const row = (category: FactCategory | 'all'): CategoryReport => {
    const facts = conversation.facts.filter((f) => category === 'all' || f.category === category);
    const count = (set: Set<string>) => facts.filter((f) => set.has(f.id)).length;
    return {
      category,
      facts: facts.length,
      inRawTail: count(inTail),
      keptInSummary: count(kept),
      presentWhenProbed: count(present),
      foundOnlyByRecall: count(recalledOnly),
      presentWhenParaphrased: count(presentParaphrased),
      foundOnlyByRecallParaphrased: count(recalledOnlyParaphrased),
      answeredCorrectly: input.scoreAnswers ? count(answered) : null,
    };
  };
  const sum = promptTokens.reduce((a, b) => a + b, 0);
  return {
    seed: input.seed,
    agent: input.agentName,
    model: app.settings.models.main.model,
    facts: conversation.facts.length,
    compactions,
    categories: FACT_CATEGORIES.map(row),
    total: row('all'),
    compactionTokens: {
      input: session?.compaction_input_tokens ?? 0,
      output: session?.compaction_output_tokens ?? 0,
    },
    promptTokensPerTurn: {
      mean: promptTokens.length ? Math.round(sum / promptTokens.length) : 0,
      max: Math.max(0, ...promptTokens),
    },
    unrelatedRecalled: unrelated.recall?.seqs.length ?? 0,
    failedCalls: calls.filter((call) => call.error !== undefined).length,
    summaryChars: summary.length,
  };
}

function percent(part: number, whole: number): string {
  return whole === 0 ? '—' : `${Math.round((part / whole) * 100)} %`;
}

/** The report as a Markdown table plus its totals (what the CLI prints without --json). */
export function formatEvalReport(report: CompactionEvalReport): string {
  const header =
    '| category | facts | in raw tail | kept in summary | in request when probed | only by recall | in request, paraphrased | only by recall, paraphrased | answered correctly |';
  const rule = '|---|---:|---:|---:|---:|---:|---:|---:|---:|';
  const line = (r: CategoryReport): string =>
    `| ${[
      r.category,
      r.facts,
      percent(r.inRawTail, r.facts),
      percent(r.keptInSummary, r.facts),
      percent(r.presentWhenProbed, r.facts),
      percent(r.foundOnlyByRecall, r.facts),
      percent(r.presentWhenParaphrased, r.facts),
      percent(r.foundOnlyByRecallParaphrased, r.facts),
      r.answeredCorrectly === null ? 'n/a' : percent(r.answeredCorrectly, r.facts),
    ].join(' | ')} |`;
  return [
    `agent ${report.agent}, model ${report.model}, seed ${report.seed}: ${report.facts} facts, ${report.compactions} compactions`,
    '',
    header,
    rule,
    ...report.categories.map(line),
    line(report.total),
    '',
    `compaction tokens: ${report.compactionTokens.input} in / ${report.compactionTokens.output} out`,
    `prompt tokens per turn: mean ${report.promptTokensPerTurn.mean}, max ${report.promptTokensPerTurn.max}`,
    `summary: ${report.summaryChars} characters; unrelated question recalled ${report.unrelatedRecalled} message(s); failed model calls: ${report.failedCalls}`,
  ].join('\n');
}
