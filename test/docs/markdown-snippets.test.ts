/** The docs test's snippet extractor: sh/bash fences only, with their markers. */
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

  it('reads the error code a snippet expects', () => {
    const md = [
      'Undo it again:',
      '<!-- docs-test: expect-error COMPACTION_CONFLICT -->',
      '',
      '```sh',
      'curl -s -X POST http://127.0.0.1:5050/sessions/$SESSION/compact/undo',
      '```',
      '<!-- docs-test: expect-error -32001 -->',
      '```sh',
      'curl -s http://127.0.0.1:5050/a2a/assistant',
      '```',
    ].join('\n');
    expect(shellSnippets(md)).toEqual([
      {
        line: 4,
        code: 'curl -s -X POST http://127.0.0.1:5050/sessions/$SESSION/compact/undo',
        expectError: 'COMPACTION_CONFLICT',
      },
      { line: 8, code: 'curl -s http://127.0.0.1:5050/a2a/assistant', expectError: '-32001' },
    ]);
  });

  it('takes the fence marked as output as the output of the snippet before it', () => {
    const md = [
      '```sh',
      'cairn eval compaction',
      '```',
      'It prints:',
      '<!-- docs-test: output -->',
      '```text',
      '| all | 40 |',
      '```',
      '```sh',
      'ls',
      '```',
    ].join('\n');
    expect(shellSnippets(md)).toEqual([
      { line: 1, code: 'cairn eval compaction', output: '| all | 40 |' },
      { line: 9, code: 'ls' },
    ]);
    expect(() => shellSnippets('<!-- docs-test: output -->\n```text\nx\n```')).toThrow(
      /above the output of a snippet/,
    );
    expect(() =>
      shellSnippets('```sh\nls\n```\n<!-- docs-test: skip no -->\n```text\nx\n```'),
    ).toThrow(/belongs above a sh or bash fence/);
  });

  it('refuses a marker without its argument, an unknown marker and an unclosed fence', () => {
    expect(() => shellSnippets('<!-- docs-test: skip -->\n```sh\nls\n```')).toThrow(/reason/);
    expect(() => shellSnippets('<!-- docs-test: expect-error -->\n```sh\nls\n```')).toThrow(
      /error code/,
    );
    expect(() => shellSnippets('<!-- docs-test: run twice -->\n```sh\nls\n```')).toThrow(
      /unknown marker/,
    );
    expect(() => shellSnippets('```sh\nls')).toThrow(/never closed/);
  });
});
