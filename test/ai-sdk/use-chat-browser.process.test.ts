/**
 * `useChat` in a real browser: a small React page (test/fixtures/ai-sdk-page),
 * built with Vite and served from its own origin, talks to a real Cairn app
 * (SQLite in a temp folder, the fake model) through `server.corsOrigins`, a
 * client key and `X-Cairn-User`, in Debian's Chromium driven by
 * playwright-core. It chats, answers an `ask_user` question with
 * `addToolOutput` (the hook sends the answer by itself), and after a reload
 * shows the chat's history. No page errors.
 */
import { accessSync, constants, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { build } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from '../helpers/test-app.js';

const PAGE_SOURCE = fileURLToPath(new URL('../fixtures/ai-sdk-page/', import.meta.url));
const CHROMIUM = process.env.CAIRN_CHROMIUM ?? '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-default-apps',
  '--disable-extensions',
];
const API_KEY = 'ai-sdk-browser-admin';
/** Generous: the machine running the suite may be busy; nothing here measures speed. */
const UI_TIMEOUT_MS = 20_000;
const SETUP_TIMEOUT_MS = 120_000;

const ASKER = {
  name: 'asker',
  description: 'Books hotels, asking where',
  system: 'You book hotels.',
  tools: ['ask_user'],
  maxIterations: 6,
};

/** The fake model: asks where for a hotel, books where it was told, echoes anything else. */
function reply(body: { messages: { role: string; content: unknown }[] }) {
  const last = body.messages.at(-1)!;
  if (last.role === 'tool') return { content: `Booked in ${String(last.content)}.` };
  const text = String(last.content);
  if (text.includes('hotel'))
    return {
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    };
  return { content: `Reply to: ${text}` };
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
};

/** Serves the built page from its own origin, as a front-end's host would. */
async function servePage(dir: string): Promise<{ server: Server; origin: string }> {
  const server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    try {
      const file = readFileSync(join(dir, path === '/' ? 'index.html' : path));
      res.writeHead(200, { 'content-type': TYPES[extname(path)] ?? 'text/html; charset=utf-8' });
      res.end(file);
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

describe('useChat in Chromium', () => {
  let out: string;
  let page: { server: Server; origin: string };
  let harness: TestApp;
  let cairn: string;
  let context: BrowserContext;
  let profile: string;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    accessSync(CHROMIUM, constants.X_OK);
    out = mkdtempSync(join(tmpdir(), 'cairn-ai-sdk-page-'));
    await build({
      root: PAGE_SOURCE,
      base: './',
      configFile: false,
      logLevel: 'error',
      oxc: { jsx: { runtime: 'automatic', importSource: 'react' } },
      build: { outDir: out, emptyOutDir: true, sourcemap: false },
    });
    page = await servePage(out);
    harness = await startTestApp({
      agents: { asker: ASKER },
      server: { apiKey: API_KEY, corsOrigins: [page.origin] },
    });
    harness.fake!.setDefault(reply);
    await harness.app.server.listen({ host: '127.0.0.1', port: 0 });
    cairn = `http://127.0.0.1:${(harness.app.server.server.address() as AddressInfo).port}`;
    profile = mkdtempSync(join(tmpdir(), 'cairn-chromium-'));
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
    });
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await context?.close();
    await harness?.close();
    await new Promise((resolve) => page?.server.close(resolve));
    for (const dir of [out, profile]) if (dir) rmSync(dir, { recursive: true, force: true });
  });

  async function openPage(url: string): Promise<Page> {
    const tab = context.pages()[0] ?? (await context.newPage());
    tab.setDefaultTimeout(UI_TIMEOUT_MS);
    tab.on('pageerror', (err) => pageErrors.push(err.message));
    await tab.goto(url);
    return tab;
  }

  it(
    'chats, answers ask_user with addToolOutput, and shows the history after a reload',
    async () => {
      const created = await fetch(`${cairn}/keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'chat page', agents: ['asker'] }),
      });
      const { secret } = (await created.json()) as { secret: string };
      const query = new URLSearchParams({
        api: `${cairn}/ai-sdk/asker`,
        key: secret,
        user: 'ada',
        chat: 'browser-chat',
      });
      const tab = await openPage(`${page.origin}/index.html?${query.toString()}`);
      const messages = tab.getByRole('list', { name: 'messages' });

      await tab.getByRole('textbox', { name: 'message', exact: true }).fill('Hello');
      await tab.getByRole('button', { name: 'Send' }).click();
      await messages.getByText('Reply to: Hello').waitFor();

      await tab.getByRole('textbox', { name: 'message', exact: true }).fill('Book a hotel');
      await tab.getByRole('button', { name: 'Send' }).click();
      await tab.getByLabel('Which city?').fill('Paris');
      await tab.getByRole('button', { name: 'Answer' }).click();
      await messages.getByText('Booked in Paris.').waitFor();

      await tab.reload();
      await messages.getByText('Booked in Paris.').waitFor();
      const shown = await messages.locator('li').allInnerTexts();
      expect(shown.map((text) => text.trim())).toEqual([
        'Hello',
        'Reply to: Hello',
        'Book a hotel',
        '[ask_user: output-available]Booked in Paris.',
      ]);
      // The chat is the key's and the end user's: a session of that owner.
      const sessions = await harness.app.store.listSessions({ limit: 10 });
      expect(sessions.items.map((s) => [s.owner_key !== null, s.end_user])).toEqual([
        [true, 'ada'],
      ]);
      expect(pageErrors).toEqual([]);
    },
    SETUP_TIMEOUT_MS,
  );
});
