/**
 * The console's panels in a real browser: Debian's Chromium driven by
 * playwright-core against a real `cairn serve` child process and the fake
 * model. An agent's model and settings in words; sessions named by title or
 * first message with their counts; a compacted session whose raw tail starts
 * with a tool call, explained under the summary; a tool call's labelled
 * Arguments and Result; no "Compact now" on an empty session; tasks with their
 * times, filtered by agent and status. Each page is photographed at desktop
 * (1280×800) and phone (390×844) widths into test-artifacts/console/, and at
 * phone width nothing is wider than the screen.
 */
import { execFileSync } from 'node:child_process';
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
/** Generous: the machine running the suite may be busy; nothing here measures speed. */
const UI_TIMEOUT_MS = 20_000;
const FLOW_TIMEOUT_MS = 120_000;
/** Installing chromium on a fresh machine (scripts/ensure-chromium.sh) takes a while. */
const SETUP_TIMEOUT_MS = 600_000;
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
const SUMMARY = 'The user said hello and asked for the time in Paris.';
const CONTEXT_WINDOW = 4096;

/** Names its own model: the agent page must show that one, not the main role's. */
const AGENT = {
  name: 'assistant',
  description: 'Console panels test agent',
  system: 'You are a test assistant.',
  model: 'console-model',
  tools: ['current_time', 'history_search'],
  maxIterations: 6,
  limits: { maxToolCalls: 8 },
};

const GUARDED = {
  name: 'guarded',
  description: 'Asks before it acts',
  system: 'You tell the time, with permission.',
  tools: [{ tool: 'current_time', approval: 'required', approvalTimeout: '30m' }],
  maxIterations: 4,
};

/** Long enough that half the history ends right after it: the tail then starts with the tool call. */
const LONG_QUESTION = `what time is it in Paris? ${'I need to know for a call. '.repeat(24)}`;

function reply(body: { messages: { role: string; content: unknown }[] }) {
  if (isSummaryRequest(body)) return { content: SUMMARY };
  const last = body.messages.at(-1)!;
  if (last.role === 'tool') return { content: `Tool said: ${String(last.content)}` };
  const text = String(last.content);
  // The long question searches the history (a tool with arguments); the short one asks the time.
  if (text.includes('in Paris'))
    return {
      tool_calls: [{ name: 'history_search', arguments: JSON.stringify({ query: 'Lyon' }) }],
    };
  if (text.includes('what time'))
    return { tool_calls: [{ name: 'current_time', arguments: '{}' }] };
  return { content: `Reply to: ${text}` };
}

interface Browser {
  context: BrowserContext;
  page: Page;
  pageErrors: string[];
  foreignRequests: string[];
  close(): Promise<void>;
}

async function openBrowser(origin: string): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'cairn-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: DESKTOP,
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  const pageErrors: string[] = [];
  const foreignRequests: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (message) => {
    if (message.type() === 'error') pageErrors.push(message.text());
  });
  context.on('request', (request) => {
    const url = request.url();
    if (!url.startsWith(`${origin}/`) && !url.startsWith('data:')) foreignRequests.push(url);
  });
  return {
    context,
    page,
    pageErrors,
    foreignRequests,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

async function api<T>(url: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(url, {
    method: body === undefined ? 'GET' : 'POST',
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: (await res.json()) as T };
}

/** How far the page is wider than the screen (a string: this file has no DOM types). */
function overflow(page: Page): Promise<number> {
  return page.evaluate<number>(
    'document.documentElement.scrollWidth - document.documentElement.clientWidth',
  );
}

/**
 * Screenshots the page at desktop and phone widths (`ready` waits for what
 * must be on screen after the resize) and checks the phone layout fits.
 */
async function photograph(page: Page, name: string, ready: () => Promise<void>): Promise<void> {
  await page.setViewportSize(DESKTOP);
  await ready();
  await page.screenshot({ path: join(ARTIFACTS, `${name}-desktop.png`), fullPage: true });
  await page.setViewportSize(PHONE);
  await ready();
  expect(await overflow(page), `${name} is wider than a phone`).toBeLessThanOrEqual(0);
  await page.screenshot({ path: join(ARTIFACTS, `${name}-phone.png`), fullPage: true });
  await page.setViewportSize(DESKTOP);
}

interface SessionBody {
  session: { id: string; compact_size: number; compact_seq: number };
}
interface TaskBody {
  task: { id: string; status: string };
}

describe('the console panels in Chromium', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  let browser: Browser;
  /** A chat whose compaction left a tail that starts with a tool call. */
  let compactedId: string;
  let emptyId: string;
  let titledId: string;

  beforeAll(async () => {
    execFileSync('bash', [join(ROOT, 'scripts', 'ensure-chromium.sh')], { stdio: 'inherit' });
    mkdirSync(ARTIFACTS, { recursive: true });
    fake = await startFakeLlmServer();
    fake.setDefault(reply);
    home = makeHome(
      {
        agents: { assistant: AGENT, guarded: GUARDED },
        mainModel: { contextWindow: CONTEXT_WINDOW },
      },
      fake.baseURL,
    );
    server = await spawnServer({ home });

    // The sessions the pages show, made through the API as any client would.
    const titled = await api<SessionBody>(`${server.url}/sessions`, {
      agentName: 'assistant',
      title: 'Trip planning',
    });
    titledId = titled.json.session.id;
    const first = await api<{ sessionId: string }>(`${server.url}/agents/assistant/chat`, {
      message: 'hello',
    });
    expect(first.status).toBe(200);
    compactedId = first.json.sessionId;
    const second = await api(`${server.url}/agents/assistant/chat`, {
      message: LONG_QUESTION,
      sessionId: compactedId,
    });
    expect(second.status).toBe(200);
    const compacted = await api<{ compactedCount: number }>(
      `${server.url}/sessions/${compactedId}/compact`,
      {},
    );
    expect(compacted.status).toBe(200);
    // hello, its reply and the long question are folded: the tail begins with the tool call.
    expect(compacted.json.compactedCount).toBe(3);
    const empty = await api<SessionBody>(`${server.url}/sessions`, { agentName: 'guarded' });
    emptyId = empty.json.session.id;

    browser = await openBrowser(server.url);
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    await fake?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    "shows an agent's model and settings in words, not JSON",
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/agents/assistant`);
      const settings = page.getByRole('region', { name: 'Settings' });
      const row = (label: string) =>
        settings
          .locator('dt')
          .filter({ hasText: new RegExp(`^${label}$`) })
          .locator('xpath=following-sibling::dd[1]');
      await expect.poll(() => row('Model').textContent()).toBe('console-model (openai)');
      expect(await row('Context window').textContent()).toBe('4,096 tokens');
      expect(await row('Tools').textContent()).toBe('current_time, history_search');
      expect(await row('Limits').textContent()).toBe('8 tool calls a turn');
      const text = (await settings.textContent()) ?? '';
      expect(text).not.toContain('{');
      expect(text).not.toContain('toolsNeedingApproval');
      expect(text).not.toContain(home);
      await photograph(page, 'agent-settings', () => row('Model').waitFor());

      await page.goto(`${server.url}/console/agents/guarded`);
      await expect
        .poll(() => row('Tools').textContent())
        .toBe('current_time (needs approval, denied after 30m)');
      // The guarded agent names no model: the main role's.
      expect(await row('Model').textContent()).toBe('test-model (openai)');
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'lists sessions by title or first message, with agent, counts, compactions and times',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions`);
      const table = page.getByRole('table');
      const rowOf = (id: string) => table.getByRole('row').filter({ hasText: id });
      await rowOf(titledId)
        .getByRole('link', { name: /^Trip planning/ })
        .waitFor();
      await rowOf(compactedId)
        .getByRole('link', { name: /^hello\s+sess_/ })
        .waitFor();
      await rowOf(emptyId)
        .getByRole('link', { name: /^No messages yet/ })
        .waitFor();
      const cell = (id: string, label: string) =>
        rowOf(id).locator(`td[data-label="${label}"]`).textContent();
      expect(await cell(compactedId, 'Agent')).toBe('assistant');
      expect(await cell(emptyId, 'Agent')).toBe('guarded');
      // system, hello, its reply, the question, the tool call, its result, the answer.
      expect(await cell(compactedId, 'Messages')).toBe('7');
      expect(await cell(compactedId, 'Compactions')).toBe('1');
      expect(await cell(titledId, 'Compactions')).toBe('0');
      expect(await rowOf(compactedId).locator('time').count()).toBe(2);
      await photograph(page, 'sessions', () => rowOf(compactedId).waitFor());

      await page.getByRole('combobox', { name: 'Agent' }).selectOption('guarded');
      await rowOf(compactedId).waitFor({ state: 'detached' });
      await rowOf(emptyId).waitFor();
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'explains a tail that starts with a tool call, and labels its arguments and result',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions/${compactedId}`);
      await page.getByText('Summary covers 3 messages', { exact: true }).waitFor();
      await page.getByText(SUMMARY).waitFor();
      const note = page.getByRole('note');
      await note.waitFor();
      expect(await note.textContent()).toContain(
        'This part starts with a tool call: the request that led to it is in the summary above',
      );
      // The question it answers is folded away behind the divider.
      expect(await page.getByText(/^what time is it in Paris\?/).isVisible()).toBe(false);

      // The first block of the raw tail is that tool call: open it.
      const tool = page.locator('.transcript > ol.messages > li.msg-tool').first();
      await expect
        .poll(() => tool.locator('summary').first().textContent())
        .toBe('Tool call: history_search');
      await tool.locator('summary').first().click();
      const args = tool.getByRole('heading', { name: 'Arguments' });
      const result = tool.getByRole('heading', { name: 'Result' });
      await args.waitFor();
      await result.waitFor();
      expect(await tool.getByLabel('Arguments').textContent()).toBe('{\n  "query": "Lyon"\n}');
      expect(await tool.getByLabel('Result').textContent()).not.toContain('Error');
      const argsBox = (await args.boundingBox())!;
      const resultBox = (await result.boundingBox())!;
      expect(resultBox.y).toBeGreaterThan(argsBox.y);
      await photograph(page, 'session-tail', () => note.waitFor());
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'offers no Compact now on an empty session, and says why',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/sessions/${emptyId}`);
      const panel = page.getByRole('region', { name: 'Compaction' });
      await panel.getByText('Nothing to compact: the session has no messages yet.').waitFor();
      expect(await panel.getByRole('button', { name: 'Compact now' }).count()).toBe(0);
      expect(await panel.getByRole('button', { name: 'Preview' }).count()).toBe(0);
      expect(await panel.getByRole('button', { name: 'Undo last compaction' }).count()).toBe(0);
      await photograph(page, 'session-empty', () =>
        panel.getByText('Nothing to compact').waitFor(),
      );

      // The compacted session still has something to compact: the buttons are there.
      await page.goto(`${server.url}/console/sessions/${compactedId}`);
      await panel.getByRole('button', { name: 'Undo last compaction' }).waitFor();
      const dryRun = await api<{ compactedCount: number }>(
        `${server.url}/sessions/${compactedId}/compact`,
        { dryRun: true },
      );
      expect(await panel.getByRole('button', { name: 'Compact now' }).count()).toBe(
        dryRun.json.compactedCount > 0 ? 1 : 0,
      );
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'shows tasks with their times, filtered by agent and status',
    async () => {
      const done = await api<TaskBody>(`${server.url}/agents/assistant/tasks?wait=true`, {
        input: 'say something',
      });
      expect(done.json.task.status).toBe('completed');
      const waiting = await api<TaskBody>(`${server.url}/agents/guarded/tasks?wait=true`, {
        input: 'what time is it?',
      });
      expect(waiting.json.task.status).toBe('waiting');

      const { page } = browser;
      await page.goto(`${server.url}/console/tasks`);
      const item = (id: string) => page.locator('li.task', { hasText: id });
      await item(done.json.task.id).waitFor();
      await item(waiting.json.task.id).waitFor();
      // Created, and updated once the task finished.
      await item(done.json.task.id)
        .getByText(/^Created .+ · updated .+$/)
        .waitFor();
      expect(await item(done.json.task.id).locator('time').count()).toBe(2);

      await photograph(page, 'tasks', () => item(done.json.task.id).waitFor());

      await page.getByRole('combobox', { name: 'Agent' }).selectOption('guarded');
      await item(done.json.task.id).waitFor({ state: 'detached' });
      await item(waiting.json.task.id).waitFor();
      await page.getByRole('combobox', { name: 'Status' }).selectOption('completed');
      await page.getByText('No tasks match.').waitFor();
      await page.getByRole('combobox', { name: 'Agent' }).selectOption('');
      await item(done.json.task.id).waitFor();
      expect(await item(waiting.json.task.id).count()).toBe(0);

      expect(browser.pageErrors).toEqual([]);
      expect(browser.foreignRequests).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );
});
