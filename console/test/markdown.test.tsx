/**
 * The compaction summary is Markdown written by a model: the console shows it
 * as Markdown, and nothing in it may run script or make the browser fetch.
 */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Transcript } from '../src/components/Transcript';
import { markdownToSafeHtml } from '../src/lib/markdown';
import type { Message } from '../src/lib/types';

const SECTIONS = [
  '## Goal',
  '- plan a **weekend** in Lyon',
  '- keep it *cheap*',
  '',
  '## Decisions',
  '1. train, not car',
].join('\n');

const HOSTILE = [
  '<script>window.__cairnXss = "script"</script>',
  '',
  '<img src="/xss-probe" onerror="window.__cairnXss = \'img\'">',
  '',
  'Inline <b onclick="window.__cairnXss = 1">bold</b> and <iframe src="/x"></iframe>',
  '',
  '[click](javascript:window.__cairnXss=2) [data](data:text/html,<script>1</script>) ![probe](/xss-probe-md)',
].join('\n');

describe('markdownToSafeHtml', () => {
  it('renders headings, lists, bold and emphasis as elements', () => {
    const html = markdownToSafeHtml(SECTIONS);
    expect(html).toContain('<h2>Goal</h2>');
    expect(html).toContain('<ul>\n<li>plan a <strong>weekend</strong> in Lyon</li>');
    expect(html).toContain('<em>cheap</em>');
    expect(html).toContain('<ol>\n<li>train, not car</li>\n</ol>');
  });

  it('moves headings under the heading the Markdown sits below, never past h6', () => {
    const html = markdownToSafeHtml('# One\n\n## Two\n\n###### Six', 4);
    expect(html).toContain('<h4>One</h4>');
    expect(html).toContain('<h5>Two</h5>');
    expect(html).toContain('<h6>Six</h6>');
    expect(html).not.toMatch(/<h[1-3]>/);
  });

  it('shows raw HTML as text: no script, no image, no handler, no frame', () => {
    const html = markdownToSafeHtml(HOSTILE);
    expect(html).not.toMatch(/<(script|img|iframe|b)\b/i);
    expect(html).not.toMatch(/<[^>]+\son\w+=/i);
    expect(html).toContain('&lt;script&gt;window.__cairnXss');
    expect(html).toContain('&lt;img src=&quot;/xss-probe&quot;');
  });

  it('drops dangerous link targets and loads no image', () => {
    const html = markdownToSafeHtml(HOSTILE);
    expect(html).not.toMatch(/href="(javascript|data):/i);
    expect(html).toContain('<a href="">click</a>');
    expect(html).not.toMatch(/<[^>]+\ssrc=/i);
    // The image is its alt text as a link, which fetches nothing.
    expect(html).toContain('!<a href="/xss-probe-md">probe</a>');
  });
});

describe('the summary in the transcript', () => {
  const messages: Message[] = [
    { seq: 2, role: 'user', content: 'hello', compacted: true },
    { seq: 3, role: 'assistant', content: 'Hi.', compacted: true },
    { seq: 4, role: 'user', content: 'next', compacted: false },
  ];

  it('is Markdown, its headings under the Summary heading', () => {
    const html = renderToString(
      <Transcript messages={messages} compactSize={2} summary={SECTIONS} />,
    );
    const summary = html.slice(html.indexOf('aria-label="Summary"'));
    expect(summary).toContain('<h3>Summary</h3>');
    expect(summary).toContain('<h5>Goal</h5>');
    expect(summary).toContain('<strong>weekend</strong>');
    expect(summary).not.toContain('## Goal');
  });

  it('carries no script, image or handler from a hostile summary', () => {
    const html = renderToString(
      <Transcript messages={messages} compactSize={2} summary={HOSTILE} />,
    );
    expect(html).not.toMatch(/<(script|img|iframe)\b/i);
    expect(html).not.toMatch(/<[^>]+\son\w+=/i);
    expect(html).not.toMatch(/href="(javascript|data):/i);
  });
});
