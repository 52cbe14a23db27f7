/**
 * The process's logger: one pino instance, created before anything else, so
 * every part gets it (or a function of it) at construction. The HTTP server
 * logs through a child of the same instance.
 */
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/**
 * How the server logs: pino options (`stream` is where lines go, stdout by
 * default), `true` for info lines on stdout, or `false` for nothing (tests).
 */
export type LoggerSetting = boolean | (LoggerOptions & { stream?: DestinationStream });

/** One log line, details first (pino's order): the shape most parts take for each level. */
export type LogLine = (details: Record<string, unknown>, message: string) => void;

/** The logger `setting` asks for; at info unless it names a level. */
export function createLogger(setting: LoggerSetting): Logger {
  if (setting === false) return pino({ enabled: false });
  if (setting === true) return pino();
  const { stream, ...options } = setting;
  return stream === undefined ? pino(options) : pino(options, stream);
}

/** The levels the parts log at, as plain functions they can hold and pass on. */
export interface LogLines {
  readonly debug: LogLine;
  readonly info: LogLine;
  readonly warn: LogLine;
  readonly error: LogLine;
}

/** `logger`'s levels as `LogLines`. */
export function logLines(logger: Logger): LogLines {
  return {
    debug: (details, message) => logger.debug(details, message),
    info: (details, message) => logger.info(details, message),
    warn: (details, message) => logger.warn(details, message),
    error: (details, message) => logger.error(details, message),
  };
}
