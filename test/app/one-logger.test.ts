/**
 * One logger for the whole process, created before any part: the lines a
 * model client writes while the very first request runs land in the stream
 * given as the `logger` option, beside the server's own request line, with
 * no late wiring between them.
 */
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

interface LogLine {
  level: number;
  msg: string;
  code?: string;
  statusCode?: number;
}
const DEBUG = 20;
const WARN = 40;

/** A pino destination that keeps each JSON line it is given. */
function collectingStream(lines: LogLine[]): Writable {
  return new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
        lines.push(JSON.parse(line) as LogLine);
      done();
    },
  });
}

describe('the logger option', () => {
  let t: TestApp | undefined;
  afterEach(async () => {
    await t?.close();
    t = undefined;
  });

  it("carries a model client's warning from the first request, and the server's request line", async () => {
    const lines: LogLine[] = [];
    t = await startTestApp({
      app: { logger: { level: 'debug', stream: collectingStream(lines) } },
    });
    t.fake!.script({ status: 400 });

    const res = await t.app.server.inject({
      method: 'POST',
      url: '/agents/assistant/chat',
      payload: { message: 'hello' },
    });

    expect(res.statusCode).toBeGreaterThanOrEqual(400);
    const warning = lines.find((line) => line.msg.startsWith('model call failed'));
    expect(warning).toMatchObject({ level: WARN });
    expect(lines).toContainEqual(
      expect.objectContaining({
        level: DEBUG,
        msg: 'request completed',
        statusCode: res.statusCode,
      }),
    );
  });

  it('logs nothing when it is false', () => {
    const logger = createLogger(false);
    expect(logger.isLevelEnabled('fatal')).toBe(false);
  });
});
