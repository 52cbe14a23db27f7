/**
 * How `cairn serve` logs: pino JSON lines by default (for collectors), and
 * human-readable lines (pino-pretty, in this process, no worker thread) when
 * stdout is a terminal or CAIRN_LOG_FORMAT=pretty. CAIRN_LOG_FORMAT=json
 * forces JSON on a terminal too.
 */
import { createRequire } from 'node:module';
import type { LoggerSetting } from '../logger.js';
import type { PinoPretty as PinoPrettyFactory } from 'pino-pretty';
import { CairnError } from '../errors.js';

/** pino-pretty loads only when lines are pretty: a JSON-logging server never needs it. */
function pinoPretty(): typeof PinoPrettyFactory {
  return (createRequire(import.meta.url)('pino-pretty') as { PinoPretty: typeof PinoPrettyFactory })
    .PinoPretty;
}

export type LogFormat = 'json' | 'pretty';

/** The format asked for by CAIRN_LOG_FORMAT, else pretty on a terminal. */
export function chooseLogFormat(env: NodeJS.ProcessEnv, stdoutIsTerminal: boolean): LogFormat {
  const asked = env.CAIRN_LOG_FORMAT;
  if (asked === undefined || asked === '') return stdoutIsTerminal ? 'pretty' : 'json';
  if (asked === 'json' || asked === 'pretty') return asked;
  throw new CairnError(
    'VALIDATION_ERROR',
    `CAIRN_LOG_FORMAT must be "json" or "pretty", not "${asked}".`,
  );
}

/** The logger setting for `format` at `level`. */
export function loggerOptions(format: LogFormat, level: string, colorize: boolean): LoggerSetting {
  if (format === 'json') return { level };
  return {
    level,
    stream: pinoPretty()({
      colorize,
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname',
      singleLine: true,
      sync: true,
    }),
  };
}
