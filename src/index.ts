/**
 * The package's library entry (`main`): build a Cairn server in-process from
 * settings, as the CLI and the tests do. `cairn serve` is the usual way in.
 */
export { buildApp, startApp, type AppOptions, type CairnApp } from './app.js';
export { loadSettings, type Settings } from './config/settings.js';
export { CairnError } from './errors.js';
