/**
 * The console in a real browser: Debian's Chromium driven by
 * playwright-core against a real `cairn serve` child process and the fake
 * model. Clicks through chat → compact → divider and summary → undo → answer
 * a waiting task → a turn sent through the API appears live; then the key
 * prompt of a server with an API key. No page errors, and no request leaves
 * the server's origin. Last, a page on another origin frames the console:
 * the browser refuses to show it. Screenshots go to test-artifacts/console/.
 */
import { accessSync, constants, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
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
/**
 * The browser is the machine's, never downloaded by the tests: when it is
 * missing, the test fails with one line that says what to install.
 */
function requireChromium(): void {
  try {
    accessSync(CHROMIUM, constants.X_OK);
  } catch {
    throw new Error(
      `Chromium is missing (${CHROMIUM}): install Debian's chromium (apt-get install chromium, or scripts/ensure-chromium.sh as root), or point CAIRN_CHROMIUM at a Chromium binary.`,
    );
  }
}
/** Headless, and quiet: no update checks, sync or other traffic of the browser's own. */
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
const FLOW_TIMEOUT_MS = 180_000;
const SETUP_TIMEOUT_MS = 120_000;
const SUMMARY = 'The user asked for the time; the assistant said it was noon.';
const API_KEY = 'console-test-key';
const CONTEXT_WINDOW = 1024;
const TOOL_FOLLOW_UP_DELAY_MS = 1_000;

const AGENT = {
  name: 'assistant',
  description: 'Console test agent',
  system: 'You are a test assistant.',
  tools: ['current_time', 'ask_user'],
  maxIterations: 6,
};

/** An agent whose one tool needs a person's approval before it runs. */
const GUARDED = {
  name: 'guarded',
  description: 'Asks before it acts',
  system: 'You tell the time, with permission.',
  tools: [{ tool: 'current_time', approval: 'required' }],
  maxIterations: 4,
};

/** A daemon agent, for the Daemons page (the server runs with --no-daemons: it never ticks). */
const TICKER = {
  name: 'ticker',
  description: 'Ticks every hour',
  system: 'You tick.',
  tools: [],
  daemon: { every: '1h', prompt: 'Report the hour.' },
};

/** The fake model's script, chosen by what it is asked. */
function reply(body: { messages: { role: string; content: unknown }[] }) {
  if (isSummaryRequest(body)) return { content: SUMMARY };
  const last = body.messages.at(-1)!;
  if (last.role === 'tool') {
    // A pause after the tool ran, so the chat box shows the call while the turn is still open.
    return { content: `Tool said: ${String(last.content)}`, delayMs: TOOL_FOLLOW_UP_DELAY_MS };
  }
  const text = String(last.content);
  if (text.includes('what time'))
    return { tool_calls: [{ name: 'current_time', arguments: '{}' }] };
  if (text.includes('weather')) {
    return {
      tool_calls: [{ name: 'ask_user', arguments: JSON.stringify({ question: 'Which city?' }) }],
    };
  }
  return { content: `Reply to: ${text}` };
}

interface Browser {
  context: BrowserContext;
  page: Page;
  pageErrors: string[];
  foreignRequests: string[];
  close(): Promise<void>;
}

/** A fresh Chromium profile watching for page errors and requests to any other origin. */
async function openBrowser(origin: string): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'cairn-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(UI_TIMEOUT_MS);
  const pageErrors: string[] = [];
  const foreignRequests: string[] = [];
  page.on('pageerror', (err) => pageErrors.push(err.message));
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().includes('401')) {
      pageErrors.push(message.text());
    }
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

interface TaskBody {
  task: { id: string; status: string };
}

async function postJson<T>(url: string, body: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as T };
}

describe('the console in Chromium', () => {
  let fake: FakeLlmServer;
  let home: string;
  let server: ServerProcess;
  let browser: Browser;

  beforeAll(async () => {
    requireChromium();
    mkdirSync(ARTIFACTS, { recursive: true });
    fake = await startFakeLlmServer();
    fake.setDefault(reply);
    // A small window, so the context bar has something to show.
    home = makeHome(
      {
        agents: { assistant: AGENT, ticker: TICKER, guarded: GUARDED },
        mainModel: { contextWindow: CONTEXT_WINDOW },
      },
      fake.baseURL,
    );
    server = await spawnServer({ home });
    browser = await openBrowser(server.url);
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    await fake?.close();
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'chats, compacts, undoes, answers a waiting task and follows a turn sent elsewhere',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/`);
      await page
        .getByRole('navigation', { name: 'Agents' })
        .getByRole('link', { name: 'assistant' })
        .click();
      await page.waitForURL(/\/console\/agents\/assistant$/);

      // Memory notes: add one, then delete it.
      await page.getByRole('textbox', { name: 'Key' }).fill('city');
      await page.getByRole('textbox', { name: 'Note' }).fill('The user lives in Lyon.');
      await page.getByRole('button', { name: 'Add note' }).click();
      await page.getByText('The user lives in Lyon.').waitFor();
      await page.getByRole('button', { name: 'Delete note city' }).click();
      await page.getByText('The user lives in Lyon.').waitFor({ state: 'detached' });

      // New chat makes no session until its first message is sent.
      const sessionCount = async () =>
        (
          (await (await fetch(`${server.url}/sessions?agentName=assistant`)).json()) as {
            sessions: unknown[];
          }
        ).sessions.length;
      const before = await sessionCount();
      await page.getByRole('button', { name: 'New chat' }).click();
      await page.waitForURL(/\/console\/agents\/assistant\/chat$/);
      await page.getByRole('heading', { name: 'New chat with assistant' }).waitFor();
      await page.goBack();
      await page.getByRole('button', { name: 'New chat' }).click();
      await page.waitForURL(/\/console\/agents\/assistant\/chat$/);
      expect(await sessionCount()).toBe(before);

      // Chat: a tool call, then the streamed reply.
      const send = async (text: string, answer: string | RegExp) => {
        await page.getByRole('textbox', { name: 'Message' }).fill(text);
        await page.getByRole('button', { name: 'Send' }).click();
        await page.getByText(answer, { exact: true }).waitFor();
      };
      await page.getByRole('textbox', { name: 'Message' }).fill('what time is it?');
      await page.getByRole('textbox', { name: 'Message' }).press('Enter');
      // The tool call shows up in the chat box while the turn runs.
      await page.getByRole('list', { name: 'Tool calls' }).getByText('current_time').waitFor();
      // Answered, the first message's session is the page.
      await page.waitForURL(/\/console\/sessions\/sess_/);
      expect(await sessionCount()).toBe(before + 1);
      const sessionUrl = page.url();
      const sessionId = sessionUrl.split('/').at(-1)!;
      await page.getByText(/^Tool said: /).waitFor();
      await expect(page.getByText('Tool call: current_time').count()).resolves.toBeGreaterThan(0);
      for (let i = 1; i <= 3; i++)
        await send(`message number ${i}`, `Reply to: message number ${i}`);

      // Preview, then compact with instructions.
      await page.getByRole('button', { name: 'Preview' }).click();
      await page.getByText(/^Preview: would compact \d+ messages/).waitFor();
      await page.getByRole('textbox', { name: 'Instructions (optional)' }).fill('Keep the times.');
      await page.getByRole('button', { name: 'Compact now' }).click();
      const divider = page.getByText(/^Summary covers \d+ messages$/);
      await divider.waitFor();
      await page.getByText(SUMMARY).waitFor();
      const summaryCall = fake.requests.filter((r) => isSummaryRequest(r.body)).at(-1)!;
      expect(JSON.stringify(summaryCall.body)).toContain('Keep the times.');
      await expect(page.getByRole('meter', { name: 'Context window used' }).count()).resolves.toBe(
        1,
      );
      await page.screenshot({ path: join(ARTIFACTS, 'session-compacted.png'), fullPage: true });

      // The compacted prefix is folded behind the divider and opens with the keyboard.
      // In the transcript: the page's heading is that question too (the session's first message).
      const firstQuestion = page
        .getByRole('region', { name: 'Transcript' })
        .getByText('what time is it?', { exact: true });
      expect(await firstQuestion.isVisible()).toBe(false);
      await divider.focus();
      await page.keyboard.press('Enter');
      await firstQuestion.waitFor();

      // Undo: the divider and the summary go away.
      await page.getByRole('button', { name: 'Undo last compaction' }).click();
      await divider.waitFor({ state: 'detached' });
      await page.getByText(/^Undone: the summary now covers 0 messages\.$/).waitFor();

      // A waiting task: its question, an answer box, and the task completes.
      const started = await postJson<TaskBody>(`${server.url}/agents/assistant/tasks?wait=true`, {
        input: 'what is the weather?',
      });
      expect(started.status).toBe(201);
      expect(started.json.task.status).toBe('waiting');
      await page.getByRole('link', { name: 'Tasks' }).click();
      await page.getByText('Which city?').waitFor();
      await page.getByRole('textbox', { name: 'Answer' }).fill('Paris');
      await page.getByRole('button', { name: 'Answer' }).click();
      await page.getByText('Tool said: Paris').waitFor();
      await page.screenshot({ path: join(ARTIFACTS, 'tasks.png'), fullPage: true });
      const task = (await (
        await fetch(`${server.url}/tasks/${started.json.task.id}`)
      ).json()) as TaskBody;
      expect(task.task.status).toBe('completed');

      // A task waiting for approval: the call is shown, Approve runs it.
      const guarded = await postJson<TaskBody>(`${server.url}/agents/guarded/tasks?wait=true`, {
        input: 'what time is it?',
      });
      expect(guarded.json.task.status).toBe('waiting');
      await page.getByRole('button', { name: 'Approve' }).waitFor();
      await page.getByText(/Approval needed: current_time/).waitFor();
      await page.screenshot({ path: join(ARTIFACTS, 'approval.png'), fullPage: true });
      await page.getByRole('button', { name: 'Approve' }).click();
      await page.getByRole('button', { name: 'Approve' }).waitFor({ state: 'detached' });
      await expect
        .poll(
          async () =>
            (
              (await (
                await fetch(`${server.url}/tasks/${guarded.json.task.id}`)
              ).json()) as TaskBody
            ).task.status,
          { timeout: UI_TIMEOUT_MS },
        )
        .toBe('completed');

      // Live: a turn sent through the API shows up in the open session view.
      await page.goBack();
      await page.waitForURL(sessionUrl);
      await page.getByText('Reply to: message number 3').waitFor();
      await page.locator('.live-live').waitFor();
      const chat = await postJson<{ reply: string }>(`${server.url}/agents/assistant/chat`, {
        message: 'sent from the API',
        sessionId,
      });
      expect(chat.status).toBe(200);
      await page.getByText('Reply to: sent from the API').waitFor();

      // Fork from here: a new session holding the conversation up to that message, opened.
      await page
        .locator('li.msg', { hasText: 'Reply to: message number 2' })
        .getByRole('button', { name: 'Fork from here' })
        .click();
      await page.waitForURL((url) => url.pathname !== new URL(sessionUrl).pathname);
      await page.getByText('Reply to: message number 2', { exact: true }).waitFor();
      expect(await page.getByText('message number 3', { exact: true }).count()).toBe(0);
      const forkId = page.url().split('/').at(-1)!;
      const forked = (await (await fetch(`${server.url}/sessions/${forkId}`)).json()) as {
        session: { id: string; agent_name: string };
      };
      expect(forked.session).toMatchObject({ id: forkId, agent_name: 'assistant' });
      await page.goto(sessionUrl);

      // Sessions: the list links to the session; a filter that matches nothing says so.
      await page.getByRole('link', { name: 'Sessions', exact: true }).click();
      await page.getByRole('link', { name: sessionId }).waitFor();
      await page.getByRole('combobox', { name: 'Agent' }).selectOption('ticker');
      await page.getByText('No sessions match.').waitFor();

      // Daemons: the scheduled agent and its (so far empty) ticks.
      await page.getByRole('link', { name: 'Daemons' }).click();
      await page.getByRole('heading', { name: 'ticker' }).waitFor();
      await page.getByText('Schedule: 1h').waitFor();
      await page.getByText('No ticks yet.').waitFor();

      // Readable on a phone: nothing wider than the screen.
      await page.goto(sessionUrl);
      await page.setViewportSize({ width: 390, height: 844 });
      await page.getByRole('textbox', { name: 'Message' }).waitFor();
      // A string, evaluated in the page: this file is type-checked without the DOM library.
      const overflow = await page.evaluate<number>(
        'document.documentElement.scrollWidth - document.documentElement.clientWidth',
      );
      expect(overflow).toBeLessThanOrEqual(0);
      await page.screenshot({ path: join(ARTIFACTS, 'session-phone.png'), fullPage: true });

      expect(browser.pageErrors).toEqual([]);
      expect(browser.foreignRequests).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );
});

describe('the console against a server with an API key', () => {
  let home: string;
  let server: ServerProcess;
  let browser: Browser;

  beforeAll(async () => {
    requireChromium();
    home = makeHome({ agents: { assistant: AGENT } }, null);
    server = await spawnServer({ home, env: { CAIRN_API_KEY: API_KEY } });
    browser = await openBrowser(server.url);
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'asks for the key once, says when it is wrong, and keeps it for the tab',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/agents`);
      const field = page.getByLabel('API key');
      await field.fill('not-the-key');
      await page.getByRole('button', { name: 'Unlock' }).click();
      await page.getByRole('alert').filter({ hasText: 'Wrong API key' }).waitFor();

      await field.fill(API_KEY);
      await page.getByRole('button', { name: 'Unlock' }).click();
      await page.getByRole('button', { name: 'New chat' }).waitFor();
      expect(await page.evaluate("sessionStorage.getItem('cairn.apiKey')")).toBe(API_KEY);

      // A reload keeps the key: no second prompt; the live stream carries it too.
      await page.reload();
      await page.getByRole('button', { name: 'New chat' }).click();
      await page.getByRole('textbox', { name: 'Message' }).fill('hello');
      await page.getByRole('textbox', { name: 'Message' }).press('Enter');
      await page.waitForURL(/\/console\/sessions\/sess_/);
      await page.locator('.live-live').waitFor();
      expect(await page.getByLabel('API key').count()).toBe(0);
      await page.screenshot({ path: join(ARTIFACTS, 'with-key.png') });

      expect(browser.pageErrors).toEqual([]);
      expect(browser.foreignRequests).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );

  it(
    'lets the admin create a key (secret shown once, never stored) and revoke it; a client key sees no keys page',
    async () => {
      const { page } = browser;
      await page.goto(`${server.url}/console/agents`);
      await page.evaluate(`sessionStorage.setItem('cairn.apiKey', ${JSON.stringify(API_KEY)})`);
      await page.goto(`${server.url}/console/agents`);
      await page.getByRole('link', { name: 'Keys' }).click();
      await page.getByLabel('Name').fill('browser ui');
      await page.getByLabel('Agents (comma-separated, empty for all)').fill('assistant');
      await page.getByRole('button', { name: 'Create key' }).click();
      const issued = page.locator('.issued-secret code');
      await issued.waitFor();
      const secret = (await issued.textContent()) ?? '';
      expect(secret).toMatch(/^cairn_sk_/);
      const stored = String(
        await page.evaluate('JSON.stringify([{ ...sessionStorage }, { ...localStorage }])'),
      );
      expect(stored).not.toContain(secret);
      await page.getByRole('button', { name: 'I have copied it' }).click();
      await issued.waitFor({ state: 'detached' });
      await page.getByRole('cell', { name: 'browser ui' }).waitFor();

      // The same console with the client key: its world only, no keys page.
      await page.evaluate(`sessionStorage.setItem('cairn.apiKey', ${JSON.stringify(secret)})`);
      await page.goto(`${server.url}/console/agents`);
      await page.getByRole('link', { name: 'assistant' }).first().waitFor();
      expect(await page.getByRole('link', { name: 'Keys' }).count()).toBe(0);
      // Memory is the admin's: the agent page of a client key has none.
      await page.goto(`${server.url}/console/agents/assistant`);
      await page.getByRole('button', { name: 'New chat' }).waitFor();
      expect(await page.getByRole('heading', { name: 'Memory notes' }).count()).toBe(0);

      await page.evaluate(`sessionStorage.setItem('cairn.apiKey', ${JSON.stringify(API_KEY)})`);
      await page.goto(`${server.url}/console/keys`);
      page.once('dialog', (dialog) => void dialog.accept());
      await page.getByRole('button', { name: 'Revoke' }).click();
      await page.getByRole('cell', { name: /^revoked / }).waitFor();
      // The console asks GET /keys to learn whether its key is the admin's: a client key's 403 is expected.
      expect(browser.pageErrors.filter((e) => !e.includes('status of 403'))).toEqual([]);
      expect(browser.foreignRequests).toEqual([]);
    },
    FLOW_TIMEOUT_MS,
  );
});

describe('the console inside another site’s frame', () => {
  let home: string;
  let server: ServerProcess;
  let foreign: Server;
  let foreignUrl: string;
  let browser: Browser;

  beforeAll(async () => {
    requireChromium();
    home = makeHome({ agents: { guarded: GUARDED } }, null);
    server = await spawnServer({ home });
    // Another origin (same address, another port) whose page frames the console.
    foreign = createHttpServer((_request, response) => {
      response.setHeader('content-type', 'text/html');
      response.end(
        `<!doctype html><title>Not Cairn</title><iframe id="victim" src="${server.url}/console/tasks" width="800" height="600"></iframe>`,
      );
    });
    await new Promise<void>((resolve) => foreign.listen(0, '127.0.0.1', resolve));
    foreignUrl = `http://127.0.0.1:${(foreign.address() as AddressInfo).port}`;
    browser = await openBrowser(foreignUrl);
  }, SETUP_TIMEOUT_MS);

  afterAll(async () => {
    await browser?.close();
    // Unset when the setup failed (no Chromium): nothing to close, nothing to wait for.
    if (foreign) await new Promise((resolve) => foreign.close(resolve));
    await server?.stop('SIGTERM');
    if (home) rmSync(home, { recursive: true, force: true });
  });

  it(
    'is refused by the browser: no console page loads in the frame',
    async () => {
      const { page } = browser;
      const refusals: string[] = [];
      page.on('console', (message) => {
        if (/frame-ancestors|X-Frame-Options/i.test(message.text())) refusals.push(message.text());
      });
      await page.goto(`${foreignUrl}/`);
      await expect.poll(() => refusals.length, { timeout: UI_TIMEOUT_MS }).toBeGreaterThan(0);
      const frame = page.frames().find((f) => f !== page.mainFrame());
      expect(frame).toBeDefined();
      // The frame holds the browser's error page, not the console: nothing to click.
      expect(frame!.url()).not.toContain('/console/');
      expect(await frame!.locator('#app').count()).toBe(0);
      await page.screenshot({ path: join(ARTIFACTS, 'framed-refused.png') });

      // The same page opened directly still works under its CSP.
      await page.goto(`${server.url}/console/tasks`);
      await page.getByRole('link', { name: 'Tasks' }).waitFor();
    },
    FLOW_TIMEOUT_MS,
  );
});
