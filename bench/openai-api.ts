/**
 * The cost of the OpenAI-compatible layer: one chat turn through
 * `POST /v1/chat/completions` against the same turn through the native
 * `POST /agents/:name/chat`, at the same session size, in-process (inject,
 * built-in offline model, no network), so the difference is the /v1 layer's
 * own work: parsing OpenAI's request, finding the session, shaping the
 * `chat.completion`. The two kinds of turn alternate, so machine noise hits
 * both alike. A third row resends the whole history each turn with no header,
 * as chat UIs do, so the session is found by its transcript hash.
 */
import type { InjectOptions } from 'fastify';
import { startBenchApp } from './bench-app.js';

const WARMUP_TURNS = 200;
const MEASURED_TURNS = 1_500;
/** Both sessions are reset every so many turns, so they stay the same size. */
const RESET_EVERY = 20;

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

export async function openaiApiRows(): Promise<string[][]> {
  const { app, close } = await startBenchApp({
    name: 'inproc',
    system: 'You are a helpful assistant.',
    tools: ['current_time'],
  });
  const timed = async (request: InjectOptions): Promise<number> => {
    const started = performance.now();
    const res = await app.server.inject(request);
    const elapsed = performance.now() - started;
    if (res.statusCode !== 200)
      throw new Error(`openai-api bench: HTTP ${res.statusCode} ${res.body}`);
    return elapsed;
  };
  try {
    const native = await app.sessions.create({ agentName: 'inproc' });
    const v1 = await app.sessions.create({ agentName: 'inproc' });
    const nativeMs: number[] = [];
    const v1Ms: number[] = [];
    const resentMs: number[] = [];
    let history: { role: string; content: string }[] = [];
    let resentSession = '';
    for (let i = 0; i < WARMUP_TURNS + MEASURED_TURNS; i++) {
      if (i % RESET_EVERY === 0) {
        await app.store.resetSession(native.id);
        await app.store.resetSession(v1.id);
        history = []; // the next resent conversation starts a new session
      }
      const message = `hello ${i}`;
      const a = await timed({
        method: 'POST',
        url: '/agents/inproc/chat',
        payload: { message, sessionId: native.id },
      });
      const b = await timed({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { 'x-cairn-session-id': v1.id },
        payload: { model: 'inproc', messages: [{ role: 'user', content: message }] },
      });
      history.push({ role: 'user', content: message });
      const started = performance.now();
      const res = await app.server.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        payload: { model: 'inproc', messages: history },
      });
      const c = performance.now() - started;
      if (res.statusCode !== 200) throw new Error(`openai-api bench: HTTP ${res.statusCode}`);
      // The bench checks its own setup: every resent turn of one conversation lands in one session.
      const session = res.headers['x-cairn-session-id'] as string;
      if (history.length > 1 && session !== resentSession)
        throw new Error('openai-api bench: a resent history did not find its session');
      resentSession = session;
      const reply = res.json<{ choices: { message: { content: string } }[] }>();
      history.push({ role: 'assistant', content: reply.choices[0]!.message.content });
      if (i >= WARMUP_TURNS) {
        nativeMs.push(a);
        v1Ms.push(b);
        resentMs.push(c);
      }
    }
    const base = median(nativeMs);
    const layer = median(v1Ms) - base;
    return [
      [
        'chat turn via /v1/chat/completions vs native /agents/:name/chat (inject, offline model, same session size): median',
        `${median(v1Ms).toFixed(2)} ms vs ${base.toFixed(2)} ms (+${layer.toFixed(2)} ms)`,
        'aim: /v1 layer < 1 ms',
        layer < 1 ? '✓' : '✗',
      ],
      [
        `chat turn via /v1, whole history resent each turn (session found by transcript hash, up to ${RESET_EVERY * 2} messages posted): median`,
        `${median(resentMs).toFixed(2)} ms`,
        '—',
        '',
      ],
    ];
  } finally {
    await close();
  }
}
