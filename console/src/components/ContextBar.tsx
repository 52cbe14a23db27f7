/** System / memory / summary / raw tokens of the next model call against the context window. */
import { contextBarModel } from '../lib/context-bar';
import type { ContextInfo } from '../lib/types';

const number = (n: number): string => n.toLocaleString('en-US');

export function ContextBar({ context }: { context: ContextInfo }) {
  const model = contextBarModel(context.tokens, context.contextWindow);
  const summary = `${number(model.total)} of ${number(model.window)} tokens (${model.usedPercent}%)`;
  return (
    <section class="context" aria-label="Context">
      <h3>Context</h3>
      <div
        class={model.over ? 'bar over' : 'bar'}
        role="meter"
        aria-label="Context window used"
        aria-valuemin={0}
        aria-valuemax={model.window}
        aria-valuenow={model.total}
        aria-valuetext={summary}
      >
        {model.segments.map((s) => (
          <span key={s.key} class={`seg seg-${s.key}`} style={{ width: `${s.percent}%` }} />
        ))}
      </div>
      <p class="context-total">{summary}</p>
      <ul class="legend">
        {model.segments.map((s) => (
          <li key={s.key}>
            <span class={`swatch seg-${s.key}`} aria-hidden="true" />
            {s.label}: <strong>{number(s.tokens)}</strong>
          </li>
        ))}
      </ul>
    </section>
  );
}
