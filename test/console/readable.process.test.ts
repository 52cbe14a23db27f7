/**
 * The console reads as a person expects, in a real browser: Debian's Chromium
 * driven by playwright-core against a real `cairn serve` child process and the
 * fake model. The compaction summary is Markdown (a heading, a list, bold) and
 * a summary carrying a <script> and an <img onerror> runs neither and fetches
 * nothing; the session is headed by how it began, not its id; the transcript
 * follows a new reply while the reader is at the bottom; an empty compaction
 * history is a sentence; tasks' input and result are labelled; the keys
 * table names its every column; an unknown agent's page offers nothing; memory
 * off is explained beside the notes; and on an offline server the model is
 * named once. Each is photographed into test-artifacts/console/.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSummaryRequest } from '../compaction/summary-requests.js';
import { startFakeLlmServer, type FakeLlmServer } from '../fakes/llm-server.js';
import { makeHome } from '../helpers/test-app.js';
import { spawnServer, type ServerProcess } from '../process/spawn-server.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const ARTIFACTS = join(ROOT, 'test-artifacts', 'console');
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
const UI_TIMEOUT_MS = 20_000;
const FLOW_TIMEOUT_MS = 120_000;
const SETUP_TIMEOUT_MS = 120_000;
const VIEWPORT = { width: 1280, height: 800 };

/** Markdown, and two ways raw HTML would run script; the probe path shows whether it was fetched. */
const SUMMARY = [
  '## Goal',
  '- plan a **weekend** in Lyon',
  '- keep it cheap',
  '',
  '<script>window.__cairnXss = "script"; fetch("/xss-probe-script")</script>',
  '',
  '<img src="/xss-probe-img" onerror="window.__cairnXss = \'img\'">',
  '',
  "[a link](javascript:window.__cairnXss='link') ![an image](/xss-probe-md)",
].join('\n');

const AGENT = {
  name: 'assistant',
  description: 'Readable console test agent',
  system: 'You are a test assistant.',
  tools: ['current_time'],
  maxIterations: 4,
};

function reply(body: { messages: { role: string; content: unknown }[] }) {
  if (isSummaryRequest(body)) return { content: SUMMARY };
  const text = String(body.messages.at(-1)!.content);
  return { content: `Reply to: ${text}` };
}

interface Browser {
  context: BrowserContext;
  page: Page;
  pageErrors: string[];
  requests: string[];
  close(): Promise<void>;
}

async function openBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'cairn-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: VIEWPORT,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  const pageErrors: string[] = [];
  const requests: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (message) => {
    if (message.type() === 'error') pageErrors.push(message.text());
  });
  context.on('request', (request) => requests.push(request.url()));
  return {
    context,
    page,
    pageErrors,
    requests,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

async function post<T>(url: string, body: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as T };
}

/** How far the page is from its bottom, in px (a string: this file has no DOM types). */
function distanceFromBottom(page: Page): Promise<number> {
  return page.evaluate<number>(
    'document.documentElement.scrollHeight - document.documentElement.scrollTop - document.documentElement.clientHeight',
  );
}

const shot = (page: Page, name: string) =>
  page.screenshot({ path: join(ARTIFACTS, `readable-${name}.png`), fullPage: true });

describe('the console reads as a person expects (Chromium)', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  let browser: Browser;
  let sessionId: string;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    fake = await startFakeLlmServer();
    fake.setDefault(reply);
    home = makeHome({ agents: { assistant: AGENT } }, fake.baseURL);
    server = await spawnServer({ home });
    // A conversation long enough to scroll, then compacted: the summary above, a tail below.
    let id: string | undefined;
    for (let i = 1; i <= 10; i++) {
      const chat = await post<{ sessionId: string }>(`${server.url}/agents/assistant/chat`, {
        message: `Plan part ${i} of the weekend in Lyon. ${'Some detail. '.repeat(20)}`,
        ...(id ? { sessionId: id } : {}),
      });
      expect(chat.status).toBe(200);
      id = chat.json.sessionId;
    }
    sessionId = id!;
    expect((await post(`${server.url}/sessions/${sessionId}/compact`, {})).status).toBe(200);
    browser = await openBrowser();
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    await fake?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'renders the summary as Markdown, runs none of its script and fetches nothing it names',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions/${sessionId}`);
      const summary = page.getByRole('region', { name: 'Summary' });
      await summary.getByRole('heading', { name: 'Goal' }).waitFor();
      expect(await summary.locator('li').count()).toBeGreaterThanOrEqual(2);
      expect(await summary.locator('strong').textContent()).toBe('weekend');
      expect(await summary.textContent()).not.toContain('## Goal');
      // The raw HTML is there as text a person can read, not as elements.
      await summary.getByText(/<script>window.__cairnXss/).waitFor();
      expect(await summary.locator('script, img, iframe, [onerror]').count()).toBe(0);
      expect(await summary.locator('a[href^="javascript:"]').count()).toBe(0);
      await summary.scrollIntoViewIfNeeded();
      await page.screenshot({ path: join(ARTIFACTS, 'readable-summary.png') });
      // Nothing ran, and nothing was fetched: give a handler or an image the time to.
      await page.waitForTimeout(500);
      expect(await page.evaluate('window.__cairnXss')).toBeUndefined();
      expect(browser.requests.filter((url) => url.includes('xss-probe'))).toEqual([]);
      expect(browser.pageErrors).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'heads the session with how it began, and follows a new reply while at the bottom',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions/${sessionId}`);
      const heading = page.locator('#session-title');
      await expect.poll(() => heading.textContent()).toMatch(/^Plan part 1 of the weekend/);
      expect(await heading.textContent()).not.toContain('sess_');
      await page.locator('.live-live').waitFor();
      await page.screenshot({ path: join(ARTIFACTS, 'readable-session-top.png') });

      // At the bottom (where the page opens), a turn sent elsewhere lands and is followed.
      await page.evaluate('window.scrollTo(0, document.documentElement.scrollHeight)');
      await expect.poll(() => distanceFromBottom(page)).toBeLessThan(5);
      const chat = await post(`${server.url}/agents/assistant/chat`, {
        message: 'the newest question',
        sessionId,
      });
      expect(chat.status).toBe(200);
      const newest = page.getByText('Reply to: the newest question', { exact: true });
      await newest.waitFor();
      await expect.poll(() => distanceFromBottom(page)).toBeLessThan(5);
      await expect.poll(() => newest.isVisible()).toBe(true);
      const box = (await newest.boundingBox())!;
      expect(box.y + box.height).toBeLessThanOrEqual(VIEWPORT.height);
      await page.screenshot({ path: join(ARTIFACTS, 'readable-followed.png') });

      // Scrolled up to read, the reader stays where they are.
      await page.evaluate('window.scrollTo(0, 0)');
      await expect.poll(() => page.evaluate<number>('window.scrollY')).toBe(0);
      await post(`${server.url}/agents/assistant/chat`, { message: 'one more', sessionId });
      await page.getByText('Reply to: one more', { exact: true }).waitFor();
      await page.waitForTimeout(300);
      expect(await page.evaluate<number>('window.scrollY')).toBe(0);
      expect(browser.pageErrors).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'says there are no compactions yet in a sentence, not as item 1',
    async () => {
      const empty = await post<{ session: { id: string } }>(`${server.url}/sessions`, {
        agentName: 'assistant',
      });
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions/${empty.json.session.id}`);
      const panel = page.getByRole('region', { name: 'Compaction' });
      await panel.getByText('No compactions yet.').waitFor();
      expect(await panel.locator('ol li', { hasText: 'No compactions yet.' }).count()).toBe(0);
      // Nothing said yet: named by its agent and start, not its id.
      expect(await page.locator('#session-title').textContent()).toMatch(
        /^Session with assistant, started /,
      );
      await shot(page, 'empty-session');
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    "labels tasks' input and result, and names every column of the keys table",
    async () => {
      const task = await post<{ task: { id: string; status: string } }>(
        `${server.url}/agents/assistant/tasks?wait=true`,
        { input: 'summarise the plan' },
      );
      expect(task.json.task.status).toBe('completed');
      const { page } = browser;
      await page.goto(`${server.url}/console/tasks`);
      const item = page.locator('li.task', { hasText: task.json.task.id });
      const value = (label: string) =>
        item.locator('dt', { hasText: label }).locator('xpath=following-sibling::dd[1]');
      await expect.poll(() => value('Input').textContent()).toBe('summarise the plan');
      expect(await value('Result').textContent()).toBe('Reply to: summarise the plan');
      await shot(page, 'tasks');

      const created = await post(`${server.url}/keys`, { name: 'phone app', agents: '*' });
      expect(created.status).toBe(201);
      await page.goto(`${server.url}/console/keys`);
      await page.getByRole('cell', { name: 'phone app' }).waitFor();
      const headers = await page.getByRole('columnheader').allTextContents();
      expect(headers).toHaveLength(7);
      for (const header of headers) expect(header.trim()).not.toBe('');
      await shot(page, 'keys');
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'says an unknown agent does not exist, offering nothing; explains memory off beside the notes',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/agents/nobody`);
      await page.getByRole('heading', { name: 'No agent named “nobody”' }).waitFor();
      expect(await page.getByRole('button').count()).toBe(0);
      expect(await page.getByRole('heading', { name: 'Memory notes' }).count()).toBe(0);
      expect(await page.getByRole('alert').count()).toBe(0);
      await shot(page, 'unknown-agent');

      const put = await fetch(`${server.url}/agents/assistant/memory/city`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ content: 'The user lives in Lyon.' }),
      });
      expect(put.status).toBe(200);
      await page.goto(`${server.url}/console/agents/assistant`);
      await page.getByText('The user lives in Lyon.').waitFor();
      await page.getByRole('note').filter({ hasText: 'Memory is off for this agent' }).waitFor();
      const memory = page
        .locator('dt', { hasText: /^Memory$/ })
        .locator('xpath=following-sibling::dd[1]');
      expect(await memory.textContent()).toBe(
        'off: notes are kept, but the model is not given them',
      );
      await shot(page, 'memory-off');
      // The unknown agent's page asks for nothing of it: no 404 in the console.
      expect(browser.pageErrors).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );
});

describe('the console of an offline server (Chromium)', () => {
  let home: string;
  let server: ServerProcess;
  let browser: Browser;

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    home = makeHome({ agents: { assistant: AGENT } }, null);
    server = await spawnServer({ home });
    browser = await openBrowser();
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'names the built-in offline model once',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/agents/assistant`);
      const model = page
        .locator('dt', { hasText: /^Model$/ })
        .locator('xpath=following-sibling::dd[1]');
      await expect.poll(() => model.textContent()).toBe('the built-in offline model (no network)');
      await shot(page, 'offline-model');
      expect(browser.pageErrors).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );
});
