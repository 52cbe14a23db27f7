/**
 * The bench's model: the scripted fake OpenAI server (test/fakes), run in its
 * own process so its work does not share the measured server's event loop.
 * It answers instantly with a short text, validation off (nothing to check
 * here, and every microsecond it spends is on the measured path). Prints
 * `{"baseURL": …}` on one line once listening; exits on SIGTERM.
 */
import { startFakeLlmServer } from '../test/fakes/llm-server.js';

const fake = await startFakeLlmServer({ validate: false });
fake.setDefault(() => ({ content: 'ok' }));
// The fake records every request; the bench never reads them.
const forget = setInterval(() => (fake.requests.length = 0), 1_000);
process.stdout.write(`${JSON.stringify({ baseURL: fake.baseURL })}\n`);
process.once('SIGTERM', () => {
  clearInterval(forget);
  void fake.close().then(() => process.exit(0));
});
