/**
 * Shared by the tests that build DefaultCompaction by hand: the agent they
 * compact for, messages of known sizes, reading a summary request's
 * transcript back as message tags, and catching a run's failure.
 */
import { expect } from 'vitest';
import { NEW_MESSAGES } from '../../src/compaction/prompt.js';
import type { CairnError } from '../../src/errors.js';
import type { ChatMessage } from '../../src/llm/messages.js';
import { TEST_AGENT } from '../helpers/test-app.js';

export const MAX_SUMMARY_CHARS = 4_000;

/** The test agent, with prose summaries of at most MAX_SUMMARY_CHARS. */
export const AGENT = {
  ...TEST_AGENT,
  defaultCompaction: { maxSummaryChars: MAX_SUMMARY_CHARS, summaryFormat: 'prose' },
};

/** A text of exactly `chars` characters starting with `tag`. */
export const text = (chars: number, tag: string) => `${tag} `.padEnd(chars, 'x');

/** User and assistant messages in turn, of the given sizes, tagged `${prefix}0`, `${prefix}1`, … */
export const alternating = (sizes: readonly number[], prefix: string): ChatMessage[] =>
  sizes.map((chars, i) => ({
    role: i % 2 === 0 ? 'user' : 'assistant',
    content: text(chars, `${prefix}${i}`),
  }));

/**
 * The message tags of a summary request's transcript, in order; a line that
 * is not one of the test's messages is returned whole, so it fails the comparison.
 */
export function tagsOf(body: { messages: { content: string }[] }, prefix: string): string[] {
  const user = body.messages[1]!.content;
  const at = user.indexOf(NEW_MESSAGES);
  expect(at).toBeGreaterThan(0);
  const transcript = user.slice(at + NEW_MESSAGES.length);
  if (transcript === '') return [];
  const entry = new RegExp(`^\\[(?:#\\d+ )?(?:user|assistant)\\] (${prefix}\\d+) x*$`);
  return transcript.split('\n').map((line) => entry.exec(line)?.[1] ?? line);
}

/** The error `work` fails with; the test fails when it succeeds. */
export async function failureOf(work: Promise<unknown>): Promise<CairnError> {
  const err = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Error);
  return err as CairnError;
}
