/**
 * Markdown from a model (a compaction summary) as HTML the console can put on
 * the page. The console holds the API key, so this HTML must never carry
 * script: micromark escapes raw HTML and drops URLs with dangerous protocols
 * (`javascript:`, `data:` …) by default; on top of that, raw HTML and images
 * are switched off as constructs, so `<script>` reads as text and a summary
 * can make the browser fetch nothing. Headings are moved under the heading
 * the markdown sits below, so the page's outline stays whole.
 */
import { micromark } from 'micromark';

const NO_HTML_NO_IMAGES = { disable: { null: ['htmlFlow', 'htmlText', 'labelStartImage'] } };

/**
 * CommonMark `markdown` as safe HTML, its `#` heading at level
 * `topHeadingLevel` (deeper ones below it, never past `h6`).
 */
export function markdownToSafeHtml(markdown: string, topHeadingLevel = 1): string {
  const html = micromark(markdown, {
    allowDangerousHtml: false,
    allowDangerousProtocol: false,
    extensions: [NO_HTML_NO_IMAGES],
  });
  const shift = topHeadingLevel - 1;
  if (shift <= 0) return html;
  // Only micromark writes tags here (raw HTML is escaped), and its headings carry no attributes.
  return html.replace(
    /<(\/?)h([1-6])>/g,
    (_tag, close: string, level: string) => `<${close}h${Math.min(6, Number(level) + shift)}>`,
  );
}
