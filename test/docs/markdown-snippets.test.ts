/** The docs test's snippet extractor: sh/bash fences only, skip markers need a reason. */
import { describe, expect, it } from 'vitest';
import { shellSnippets } from './markdown-snippets.js';

describe('shellSnippets', () => {
  it('takes sh and bash fences in order, with their skip reasons', () => {
    const md = [
      '```sh',
      'curl -s http://127.0.0.1:5050/health',
      '```',
      '```json',
      '{"status":"ok"}',
      '```',
      '<!-- docs-test: skip needs a real provider -->',
      '',
      '```bash',
      'OPENAI_API_KEY=sk-... npm start',
      '```',
      '```',
      'output only',
      '```',
    ].join('\n');
    expect(shellSnippets(md)).toEqual([
      { line: 1, code: 'curl -s http://127.0.0.1:5050/health' },
      { line: 9, code: 'OPENAI_API_KEY=sk-... npm start', skip: 'needs a real provider' },
    ]);
  });

  it('refuses a skip marker without a reason and an unclosed fence', () => {
    expect(() => shellSnippets('<!-- docs-test: skip -->\n```sh\nls\n```')).toThrow(/reason/);
    expect(() => shellSnippets('```sh\nls')).toThrow(/never closed/);
  });
});
