/**
 * The behaviour every `Store` implementation must have (one contract suite
 * per interface, run against every implementation):
 * one suite, registered by each implementation's test file with its own
 * factory, so SQLite today and Postgres later are held to the same contract.
 * Every method of `Store` is exercised here; `sqlite-store.test.ts` checks that
 * no method of the interface is left out.
 *
 * Tests only use the public interface and make no assumption about timestamp
 * resolution: where an order depends on time, they wait a few milliseconds
 * between writes.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CairnError } from '../../src/errors.js';
import type { ChatMessage, StoredMessage } from '../../src/llm/messages.js';
import { estimateMessageTokens } from '../../src/llm/tokens.js';
import { nextTranscriptHash, transcriptHash } from '../../src/store/transcript-hash.js';
import { RECALL_CONTENT_CHARS } from '../../src/store/store.js';
import { encodeRequest, type RequestState } from '../../src/records/request-delta.js';
import type {
  AppendOptions,
  FrontEndChat,
  NewCompaction,
  NewModelCall,
  NewSession,
  SessionRow,
  Store,
  TaskRow,
} from '../../src/store/store.js';
import { ADMIN_OWNER } from '../../src/store/store.js';

export interface StoreFixture {
  store: Store;
  /** Another store on the same database, opened as instance `instanceId` (closed by cleanup). */
  openInstance(instanceId: string): Promise<Store>;
  cleanup(): Promise<void>;
}

/** Waits long enough that the next write gets a later timestamp than the previous one. */
function tick(ms = 5): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * A message as a context read (and appendMessages) returns it: with the token
 * estimate stored when it was written. Pages of listMessages leave it out.
 */
function withTokens<M extends ChatMessage>(message: M): M & { tokens: number } {
  return { ...message, tokens: estimateMessageTokens(message) };
}

/** A message as listMessages returns it: without the stored estimate. */
function withoutTokens(message: StoredMessage): StoredMessage {
  const { tokens: _tokens, ...rest } = message;
  return rest;
}

/** `count` alternating user/assistant messages whose content is `${prefix} ${i}`. */
function conversation(count: number, prefix = 'message'): ChatMessage[] {
  return Array.from({ length: count }, (_, i) => ({
    role: i % 2 === 0 ? ('user' as const) : ('assistant' as const),
    content: `${prefix} ${i}`,
  }));
}

/** The rejection of `promise`, or a failed expectation when it resolves. */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    (value) => {
      throw new Error(`expected a rejection, got ${JSON.stringify(value)}`);
    },
    (err: unknown) => err,
  );
}

async function expectCairnError(promise: Promise<unknown>, code: string): Promise<void> {
  const err = await rejectionOf(promise);
  expect(err).toBeInstanceOf(CairnError);
  expect((err as CairnError).code).toBe(code);
}

function ms(iso: string | null): number {
  return Date.parse(iso ?? '');
}

/** Registers the Store contract suite for one implementation. */
export function describeStoreContract(name: string, makeStore: () => Promise<StoreFixture>): void {
  describe(`Store contract: ${name}`, () => {
    let store: Store;
    let fixture: StoreFixture;

    beforeEach(async () => {
      fixture = await makeStore();
      store = fixture.store;
    });
    afterEach(async () => {
      await fixture.cleanup();
    });

    function newSession(overrides: Partial<NewSession> = {}): Promise<SessionRow> {
      return store.createSession({
        agentName: 'assistant',
        mode: 'chat',
        compactCount: 50,
        systemPrompt: 'You are a test assistant.',
        ...overrides,
      });
    }

    async function allMessages(sessionId: string): Promise<StoredMessage[]> {
      return store.listMessages(sessionId, { afterSeq: 0, limit: 10_000 });
    }

    function compaction(
      sessionId: string,
      fields: Partial<NewCompaction> & Pick<NewCompaction, 'expectedSize' | 'toSize' | 'toSeq'>,
    ): NewCompaction {
      return {
        sessionId,
        summary: `summary up to ${fields.toSeq}`,
        trigger: 'manual',
        model: 'compact-model',
        inputChars: 1_000,
        ...fields,
      };
    }

    describe('message vectors', () => {
      it('walks what has no vector, then loads, lists, imports and reads back by seq', async () => {
        const vectorOf = (xs: number[]) => new Float32Array(xs);
        const conversationOf = (): ChatMessage[] => [
          { role: 'user', content: 'alpha' },
          { role: 'assistant', content: 'beta' },
        ];
        const source = await newSession();
        await store.appendMessages(source.id, conversationOf());
        const todo = await store.unembeddedMessages('m', 2, 0, 10);
        expect(todo.map((m) => m.content)).toEqual(['alpha', 'beta']);
        // The owner key comes with each message: the walk reserves its call on that key.
        expect(todo.map((m) => m.owner_key)).toEqual([source.owner_key, source.owner_key]);
        await store.saveVectors(
          todo.map((m, i) => ({
            messageId: m.id,
            model: 'm',
            dimensions: 2,
            vector: vectorOf(i === 0 ? [1, 0] : [0, 1]),
          })),
          [],
        );
        // Done for this model; another model or size still has all to do.
        expect(await store.unembeddedMessages('m', 2, 0, 10)).toEqual([]);
        expect(await store.unembeddedMessages('other', 2, 0, 10)).toHaveLength(2);
        // Dimensions not known yet (-1, a role that sets none): the model's vectors count as done.
        expect(await store.unembeddedMessages('m', -1, 0, 10)).toEqual([]);
        expect(await store.unembeddedMessages('m', 3, 0, 10)).toHaveLength(2);
        const loaded = await store.loadVectors(source.id, 'm', 2, 0, 10);
        expect(loaded.map((v) => [v.seq, Array.from(v.vector)])).toEqual([
          [todo[0]!.seq, [1, 0]],
          [todo[1]!.seq, [0, 1]],
        ]);
        expect(await store.loadVectors(source.id, 'm', 3, 0, 10)).toEqual([]);
        const listed = await store.listVectors(source.id, 0, 10);
        expect(listed.map((v) => v.seq)).toEqual(todo.map((m) => m.seq));

        const copy = await newSession();
        await store.appendMessages(copy.id, conversationOf());
        await store.appendImportedVectors(copy.id, listed);
        const imported = await store.loadVectors(copy.id, 'm', 2, 0, 10);
        expect(imported.map((v) => Array.from(v.vector))).toEqual([
          [1, 0],
          [0, 1],
        ]);
        const hits = await store.messagesAtSeqs(source.id, [todo[1]!.seq], 1_000_000);
        expect(hits.map((h) => h.content)).toEqual(['beta']);
      });
    });

    it('reports its kind', () => {
      expect(['sqlite', 'postgres']).toContain(store.kind);
    });

    it('answers a ping while the database is reachable', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });

    describe('SessionStore', () => {
      describe('createSession / findSession', () => {
        it('creates an active session with zeroed counters and the system prompt as seq 1', async () => {
          const session = await newSession({ title: 'First', compactCount: 40 });
          expect(session).toMatchObject({
            agent_name: 'assistant',
            mode: 'chat',
            status: 'active',
            title: 'First',
            parent_session_id: null,
            input_tokens: 0,
            output_tokens: 0,
            compact_summary: null,
            compact_size: 0,
            compact_count: 40,
            compaction_count: 0,
            compact_seq: 0,
            last_prompt_tokens: null,
            last_prompt_seq: null,
            compaction_suspended: 0,
          });
          expect(session.id).toMatch(/^sess_[A-Za-z0-9]+$/);
          expect(Number.isNaN(ms(session.created_at))).toBe(false);
          expect(ms(session.updated_at)).toBeGreaterThanOrEqual(ms(session.created_at));

          const messages = await allMessages(session.id);
          expect(messages).toHaveLength(1);
          expect(messages[0]).toMatchObject({
            session_id: session.id,
            seq: 1,
            role: 'system',
            content: 'You are a test assistant.',
          });
          expect(session.message_count).toBe(messages.length);
          expect(await store.findSession(session.id)).toEqual(session);
        });

        it('snapshots compact_count exactly, fractions included', async () => {
          for (const compactCount of [33.3, 12.5, 66.67, 1, 99, 0.1 + 0.2]) {
            const session = await newSession({ compactCount });
            expect(session.compact_count).toBe(compactCount);
            expect((await store.findSession(session.id))?.compact_count).toBe(compactCount);
          }
        });

        it('gives every session its own id', async () => {
          const ids = new Set<string>();
          for (let i = 0; i < 20; i++) ids.add((await newSession()).id);
          expect(ids.size).toBe(20);
        });

        it('stores the parent of a subagent session and a null title by default', async () => {
          const parent = await newSession();
          const child = await newSession({
            agentName: 'researcher',
            mode: 'subagent',
            parentSessionId: parent.id,
          });
          expect(child).toMatchObject({
            parent_session_id: parent.id,
            title: null,
            mode: 'subagent',
          });
        });

        it('returns undefined for an unknown session', async () => {
          expect(await store.findSession('sess_doesnotexist')).toBeUndefined();
        });
      });

      describe('listSessions', () => {
        async function sessionsForFilters() {
          const parent = await newSession({ agentName: 'assistant', mode: 'chat' });
          const child1 = await newSession({
            agentName: 'researcher',
            mode: 'subagent',
            parentSessionId: parent.id,
          });
          const child2 = await newSession({
            agentName: 'researcher',
            mode: 'subagent',
            parentSessionId: parent.id,
          });
          const task = await newSession({ agentName: 'assistant', mode: 'task' });
          const daemon = await newSession({ agentName: 'ticker', mode: 'daemon' });
          await store.closeSession(daemon.id);
          const other = await newSession({ agentName: 'researcher', mode: 'chat' });
          return { parent, child1, child2, task, daemon, other };
        }

        async function idsOf(filter: Parameters<Store['listSessions']>[0]): Promise<string[]> {
          const page = await store.listSessions(filter);
          expect(page.nextCursor).toBeNull();
          return page.items.map((s) => s.id).sort();
        }

        it('filters by agentName, status, mode and parentSessionId, alone and combined', async () => {
          const s = await sessionsForFilters();
          const sorted = (...rows: SessionRow[]) => rows.map((r) => r.id).sort();

          expect(await idsOf({ limit: 100 })).toEqual(
            sorted(s.parent, s.child1, s.child2, s.task, s.daemon, s.other),
          );
          expect(await idsOf({ agentName: 'researcher', limit: 100 })).toEqual(
            sorted(s.child1, s.child2, s.other),
          );
          expect(await idsOf({ status: 'closed', limit: 100 })).toEqual(sorted(s.daemon));
          expect(await idsOf({ status: 'active', limit: 100 })).toEqual(
            sorted(s.parent, s.child1, s.child2, s.task, s.other),
          );
          expect(await idsOf({ mode: 'subagent', limit: 100 })).toEqual(sorted(s.child1, s.child2));
          expect(await idsOf({ parentSessionId: s.parent.id, limit: 100 })).toEqual(
            sorted(s.child1, s.child2),
          );
          expect(await idsOf({ agentName: 'assistant', mode: 'task', limit: 100 })).toEqual(
            sorted(s.task),
          );
          expect(
            await idsOf({ agentName: 'researcher', mode: 'chat', status: 'active', limit: 100 }),
          ).toEqual(sorted(s.other));
          expect(await idsOf({ agentName: 'nobody', limit: 100 })).toEqual([]);
        });

        it('returns full rows, newest first', async () => {
          const first = await newSession({ title: 'older' });
          await tick();
          const second = await newSession({ title: 'newer' });
          const page = await store.listSessions({ limit: 10 });
          expect(page.items.map((r) => r.id)).toEqual([second.id, first.id]);
          expect(page.items[0]).toEqual(await store.findSession(second.id));
        });

        it('pages with a cursor covering every row exactly once, for any page size', async () => {
          const created: string[] = [];
          for (let i = 0; i < 9; i++) {
            created.push((await newSession({ agentName: i % 3 === 0 ? 'odd' : 'even' })).id);
          }
          const all = await store.listSessions({ limit: 100 });
          expect(all.items).toHaveLength(9);
          for (let i = 1; i < all.items.length; i++) {
            expect(ms(all.items[i - 1]!.created_at)).toBeGreaterThanOrEqual(
              ms(all.items[i]!.created_at),
            );
          }

          for (const limit of [1, 2, 4, 8, 9, 10]) {
            const seen: string[] = [];
            let cursor: string | undefined;
            let pages = 0;
            for (;;) {
              const page = await store.listSessions({ limit, cursor });
              pages += 1;
              expect(page.items.length).toBeLessThanOrEqual(limit);
              seen.push(...page.items.map((r) => r.id));
              if (page.nextCursor === null) break;
              expect(page.items).toHaveLength(limit);
              cursor = page.nextCursor;
              expect(pages).toBeLessThan(20);
            }
            expect(seen).toEqual(all.items.map((r) => r.id));
            expect(pages).toBe(Math.max(1, Math.ceil(9 / limit)));
          }
          expect([...created].sort()).toEqual(all.items.map((r) => r.id).sort());
        });

        it('pages within a filter', async () => {
          const wanted: string[] = [];
          for (let i = 0; i < 7; i++) {
            const row = await newSession({ agentName: i % 2 === 0 ? 'alpha' : 'beta' });
            if (row.agent_name === 'alpha') wanted.push(row.id);
          }
          const seen: string[] = [];
          let cursor: string | undefined;
          do {
            const page = await store.listSessions({ agentName: 'alpha', limit: 3, cursor });
            seen.push(...page.items.map((r) => r.id));
            cursor = page.nextCursor ?? undefined;
          } while (cursor !== undefined);
          expect(new Set(seen).size).toBe(seen.length);
          expect(seen.sort()).toEqual(wanted.sort());
        });

        it('does not repeat or skip rows when sessions are created between pages', async () => {
          const original: string[] = [];
          for (let i = 0; i < 6; i++) original.push((await newSession()).id);
          const seen: string[] = [];
          let cursor: string | undefined;
          do {
            const page = await store.listSessions({ limit: 2, cursor });
            seen.push(...page.items.map((r) => r.id));
            await newSession();
            cursor = page.nextCursor ?? undefined;
          } while (cursor !== undefined);
          expect(new Set(seen).size).toBe(seen.length);
          for (const id of original) expect(seen).toContain(id);
        });

        it('rejects a cursor it did not make with VALIDATION_ERROR', async () => {
          await newSession();
          const bad = [
            'not-a-cursor',
            '',
            '%%%',
            Buffer.from('{"a":1}').toString('base64url'),
            Buffer.from('[1,2]').toString('base64url'),
            Buffer.from('["only-one"]').toString('base64url'),
          ];
          for (const cursor of bad) {
            await expectCairnError(store.listSessions({ limit: 10, cursor }), 'VALIDATION_ERROR');
          }
        });
      });

      describe('resetSession', () => {
        it('deletes the conversation, zeroes tokens and clears every compaction column and row', async () => {
          const session = await newSession({ compactCount: 33.3 });
          await store.appendMessages(session.id, conversation(8, 'pelican'), {
            usage: { input_tokens: 120, output_tokens: 45 },
            promptTokens: 100,
          });
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5 }),
          );
          await store.setCompactionSuspended(session.id, true);
          const before = (await store.findSession(session.id))!;
          expect(before).toMatchObject({ compaction_count: 1, compact_size: 4, input_tokens: 120 });

          const reset = await store.resetSession(session.id);
          expect(reset).toMatchObject({
            id: session.id,
            status: 'active',
            input_tokens: 0,
            output_tokens: 0,
            compact_summary: null,
            compact_size: 0,
            compact_seq: 0,
            compaction_count: 0,
            compaction_suspended: 0,
            last_prompt_tokens: null,
            last_prompt_seq: null,
            compact_count: 33.3,
            agent_name: 'assistant',
          });
          expect(reset?.epoch).toBeGreaterThan(before.epoch);
          expect(await store.findSession(session.id)).toEqual(reset);

          const messages = await allMessages(session.id);
          expect(messages.map((m) => [m.seq, m.role, m.content])).toEqual([
            [1, 'system', 'You are a test assistant.'],
          ]);
          expect(reset?.message_count).toBe(messages.length);
          expect(await store.listCompactions(session.id)).toEqual([]);
          expect(await store.undoCompaction(session.id)).toBeUndefined();
          expect(await store.searchHistory(session.id, 'pelican', 10)).toEqual([]);
          expect((await store.loadContext(session.id, 0)).tail).toEqual([]);
        });

        it('keeps later system messages and lets the conversation start again', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'hello' },
            { role: 'system', content: 'Extra instructions.' },
            { role: 'assistant', content: 'hi' },
          ]);
          await store.resetSession(session.id);
          const { system, tail } = await store.loadContext(session.id, 0);
          expect(system.map((m) => m.content)).toEqual([
            'You are a test assistant.',
            'Extra instructions.',
          ]);
          expect(tail).toEqual([]);

          const [added] = await store.appendMessages(session.id, [
            { role: 'user', content: 'again' },
          ]);
          expect(added!.seq).toBeGreaterThan(Math.max(...system.map((m) => m.seq)));
          expect((await store.loadContext(session.id, 0)).tail.map((m) => m.content)).toEqual([
            'again',
          ]);
          expect((await store.findSession(session.id))?.message_count).toBe(
            (await allMessages(session.id)).length,
          );
        });

        it('never reuses a seq: messages after a reset continue past every earlier seq', async () => {
          const session = await newSession();
          const before = await store.appendMessages(session.id, conversation(6, 'heron'));
          const highest = before.at(-1)!.seq;
          await store.resetSession(session.id);
          const [next] = await store.appendMessages(session.id, [
            { role: 'user', content: 'after' },
          ]);
          expect(next!.seq).toBe(highest + 1);
          // A client paging from its last seen seq still finds the new message.
          const page = await store.listMessages(session.id, { afterSeq: highest, limit: 10 });
          expect(page.map((m) => m.content)).toEqual(['after']);
        });

        it('returns undefined for an unknown session', async () => {
          expect(await store.resetSession('sess_doesnotexist')).toBeUndefined();
        });
      });

      describe('findSessionByTranscript', () => {
        it('finds the session whose whole visible transcript has the hash, and only that one', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'hello' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                { id: 'c1', type: 'function', function: { name: 't', arguments: '{}' } },
              ],
            },
            { role: 'tool', tool_call_id: 'c1', name: 't', content: 'result' },
            { role: 'assistant', content: 'hi there' },
          ]);
          // Tool calls, tool results and system messages are not part of the visible transcript.
          const visible: ChatMessage[] = [
            { role: 'user', content: 'hello' },
            { role: 'assistant', content: 'hi there' },
          ];
          const hash = transcriptHash(visible)!;
          const row = await store.findSession(session.id);
          expect(row?.transcript_hash).toBe(hash);
          expect((await store.findSessionByTranscript('assistant', hash, ADMIN_OWNER))?.id).toBe(
            session.id,
          );
          // A prefix of the transcript, another agent, or another text: no match.
          expect(
            await store.findSessionByTranscript(
              'assistant',
              transcriptHash(visible.slice(0, 1))!,
              ADMIN_OWNER,
            ),
          ).toBeUndefined();
          expect(await store.findSessionByTranscript('other', hash, ADMIN_OWNER)).toBeUndefined();
          expect(
            await store.findSessionByTranscript(
              'assistant',
              transcriptHash([visible[0]!, { role: 'assistant', content: 'hi there!' }])!,
              ADMIN_OWNER,
            ),
          ).toBeUndefined();
        });

        it('prefers the most recently updated of two identical transcripts; a reset clears the hash', async () => {
          const older = await newSession();
          await store.appendMessages(older.id, conversation(2));
          await tick();
          const newer = await newSession();
          await store.appendMessages(newer.id, conversation(2));
          const hash = transcriptHash(conversation(2))!;
          expect((await store.findSessionByTranscript('assistant', hash, ADMIN_OWNER))?.id).toBe(
            newer.id,
          );
          const reset = await store.resetSession(newer.id);
          expect(reset?.transcript_hash).toBeNull();
          expect((await store.findSessionByTranscript('assistant', hash, ADMIN_OWNER))?.id).toBe(
            older.id,
          );
          await store.closeSession(older.id);
          expect(
            await store.findSessionByTranscript('assistant', hash, ADMIN_OWNER),
          ).toBeUndefined();
          // The chain restarts from empty after the reset.
          await store.appendMessages(newer.id, conversation(1));
          expect((await store.findSession(newer.id))?.transcript_hash).toBe(
            transcriptHash(conversation(1)),
          );
        });
      });

      describe('closeSession / deleteSession', () => {
        it('closes a session and keeps its messages', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(2));
          await tick();
          const closed = await store.closeSession(session.id);
          expect(closed).toMatchObject({ id: session.id, status: 'closed' });
          expect(ms(closed!.updated_at)).toBeGreaterThan(ms(session.updated_at));
          expect(await store.findSession(session.id)).toEqual(closed);
          expect(await allMessages(session.id)).toHaveLength(3);
          expect(await store.closeSession('sess_doesnotexist')).toBeUndefined();
        });

        it('deletes a session with its messages, tasks and compactions', async () => {
          const session = await newSession();
          const keep = await newSession();
          await store.appendMessages(session.id, conversation(4, 'walrus'));
          await store.appendMessages(keep.id, conversation(2, 'walrus'));
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 2, toSeq: 3 }),
          );
          const task = await store.createTask({
            sessionId: session.id,
            agentName: 'assistant',
            input: 'go',
          });

          expect(await store.deleteSession(session.id)).toBe(true);
          expect(await store.findSession(session.id)).toBeUndefined();
          expect(await allMessages(session.id)).toEqual([]);
          expect(await store.loadContext(session.id, 0)).toEqual({ system: [], tail: [] });
          expect(await store.listCompactions(session.id)).toEqual([]);
          expect(await store.findTask(task.id)).toBeUndefined();
          expect(await store.searchHistory(session.id, 'walrus', 10)).toEqual([]);
          expect(await store.deleteSession(session.id)).toBe(false);

          // The other session is untouched.
          expect(await allMessages(keep.id)).toHaveLength(3);
          expect((await store.searchHistory(keep.id, 'walrus', 10)).length).toBe(2);
        });

        it('deleting a parent keeps its subagent sessions, detached', async () => {
          const parent = await newSession();
          const child = await newSession({ mode: 'subagent', parentSessionId: parent.id });
          expect(await store.deleteSession(parent.id)).toBe(true);
          expect((await store.findSession(child.id))?.parent_session_id).toBeNull();
        });
      });

      describe('updateSession', () => {
        it('changes only the fields given; null clears the title; unknown id → undefined', async () => {
          const session = await newSession({ title: 'Old', compactCount: 40 });
          const renamed = await store.updateSession(session.id, { title: 'New' });
          expect(renamed).toMatchObject({ title: 'New', compact_count: 40 });
          const counted = await store.updateSession(session.id, { compactCount: 12.5 });
          expect(counted).toMatchObject({ title: 'New', compact_count: 12.5 });
          expect(await store.updateSession(session.id, { title: null })).toMatchObject({
            title: null,
          });
          expect(await store.updateSession('sess_doesnotexist', { title: 'x' })).toBeUndefined();
        });
      });
    });

    describe('MessageLog', () => {
      describe('appendMessages', () => {
        it('assigns increasing seq across calls and returns the messages as stored', async () => {
          const session = await newSession();
          const first = await store.appendMessages(session.id, conversation(3));
          expect(first.map((m) => m.seq)).toEqual([2, 3, 4]);
          for (const m of first) {
            expect(m.session_id).toBe(session.id);
            expect(Number.isNaN(ms(m.created_at))).toBe(false);
          }
          const second = await store.appendMessages(session.id, conversation(2, 'more'));
          expect(second.map((m) => m.seq)).toEqual([5, 6]);
          expect(second.map((m) => m.content)).toEqual(['more 0', 'more 1']);
          expect((await allMessages(session.id)).slice(1)).toEqual(
            [...first, ...second].map(withoutTokens),
          );
        });

        it("stores each message's token estimate once, and context reads return it", async () => {
          const session = await newSession();
          const sent: ChatMessage[] = [
            { role: 'user', content: 'How many tokens is this sentence, roughly?' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                { id: 'c1', type: 'function', function: { name: 'count', arguments: '{"n":1}' } },
              ],
            },
          ];
          const stored = await store.appendMessages(session.id, sent);
          expect(stored.map((m) => m.tokens)).toEqual(sent.map(estimateMessageTokens));
          expect(stored.every((m) => (m.tokens ?? 0) > 0)).toBe(true);
          const { system, tail } = await store.loadContext(session.id, 0);
          expect(system[0]?.tokens).toBe(estimateMessageTokens(system[0]!));
          expect(tail.map((m) => m.tokens)).toEqual(sent.map(estimateMessageTokens));
          expect((await store.listTail(session.id, 0, 10)).map((m) => m.tokens)).toEqual(
            sent.map(estimateMessageTokens),
          );
          // The API's message pages keep their shape.
          for (const m of await allMessages(session.id)) expect(m).not.toHaveProperty('tokens');
        });

        describe('one result per tool call of an assistant message', () => {
          const callOf = (id: string): ChatMessage => ({
            role: 'assistant',
            content: null,
            tool_calls: [{ id, type: 'function', function: { name: 'lookup', arguments: '{}' } }],
          });
          const resultOf = (id: string, content: string): ChatMessage => ({
            role: 'tool',
            tool_call_id: id,
            name: 'lookup',
            content,
          });

          it('refuses a second result for a call answered in an earlier append, writing nothing', async () => {
            const session = await newSession();
            await store.appendMessages(session.id, [{ role: 'user', content: 'Look it up' }]);
            await store.appendMessages(session.id, [callOf('call_0')]);
            await store.appendMessages(session.id, [resultOf('call_0', 'found')]);
            const before = await store.findSession(session.id);
            await expect(
              store.appendMessagesWithEvents(
                session.id,
                [resultOf('call_0', 'interrupted'), { role: 'assistant', content: 'Done.' }],
                'message.created',
              ),
            ).rejects.toMatchObject({ code: 'TOOL_RESULT_EXISTS', status: 409 });
            expect((await allMessages(session.id)).map((m) => m.content)).toEqual([
              'You are a test assistant.',
              'Look it up',
              null,
              'found',
            ]);
            expect(await store.findSession(session.id)).toMatchObject({
              last_seq: before!.last_seq,
              message_count: before!.message_count,
            });
            // No event of the refused append was written.
            const events = await store.listEvents({ sessionId: session.id, afterId: 0, limit: 50 });
            expect(events.filter((e) => e.type === 'message.created')).toEqual([]);
          });

          it('refuses two results for one call in the same append', async () => {
            const session = await newSession();
            await expect(
              store.appendMessages(session.id, [
                callOf('call_1'),
                resultOf('call_1', 'one'),
                resultOf('call_1', 'two'),
              ]),
            ).rejects.toMatchObject({ code: 'TOOL_RESULT_EXISTS' });
            expect(await allMessages(session.id)).toHaveLength(1);
          });

          it('answers a reused call id once per assistant message', async () => {
            const session = await newSession();
            // Some servers number calls afresh every turn.
            for (const answer of ['first', 'second']) {
              await store.appendMessages(session.id, [callOf('call_0')]);
              await store.appendMessages(session.id, [resultOf('call_0', answer)]);
            }
            expect(
              (await allMessages(session.id))
                .filter((m) => m.role === 'tool')
                .map((m) => m.content),
            ).toEqual(['first', 'second']);
          });

          it('holds in a fork, whose messages keep the calls they answer', async () => {
            const parent = await newSession();
            await store.appendMessages(parent.id, [
              { role: 'user', content: 'Look it up' },
              callOf('call_2'),
              resultOf('call_2', 'found'),
            ]);
            const fork = await store.forkSession(parent.id);
            if (fork.kind !== 'forked') throw new Error(`fork: ${fork.kind}`);
            await expect(
              store.appendMessages(fork.session.id, [resultOf('call_2', 'again')]),
            ).rejects.toMatchObject({ code: 'TOOL_RESULT_EXISTS' });
          });

          it('imports a history that already holds a duplicate result, as it was', async () => {
            const original = await newSession();
            const id = await store.createImportedSession(original);
            const at = '2026-01-01T00:00:00.000Z';
            await store.appendImportedMessages(id, [
              { seq: 1, role: 'system', content: 'sys', created_at: at },
              { seq: 2, role: 'user', content: 'Look it up', created_at: at },
              { ...callOf('call_3'), seq: 3, created_at: at },
              { ...resultOf('call_3', 'interrupted'), seq: 4, created_at: at },
              { ...resultOf('call_3', 'found'), seq: 5, created_at: at },
            ]);
            expect((await allMessages(id)).map((m) => m.content)).toEqual([
              'sys',
              'Look it up',
              null,
              'interrupted',
              'found',
            ]);
          });
        });

        it('keeps seq per session', async () => {
          const a = await newSession();
          const b = await newSession();
          await store.appendMessages(a.id, conversation(3));
          const [inB] = await store.appendMessages(b.id, conversation(1));
          expect(inB!.seq).toBe(2);
        });

        it('updates message_count, token counts and updated_at', async () => {
          const session = await newSession();
          await tick();
          await store.appendMessages(session.id, conversation(2), {
            usage: { input_tokens: 100, output_tokens: 20 },
          });
          const afterFirst = (await store.findSession(session.id))!;
          expect(afterFirst).toMatchObject({
            message_count: 3,
            input_tokens: 100,
            output_tokens: 20,
          });
          expect(ms(afterFirst.updated_at)).toBeGreaterThan(ms(session.updated_at));

          await tick();
          await store.appendMessages(session.id, conversation(1), {
            usage: { input_tokens: 7, output_tokens: 3 },
          });
          await store.appendMessages(session.id, conversation(1));
          const afterMore = (await store.findSession(session.id))!;
          expect(afterMore).toMatchObject({
            message_count: 5,
            input_tokens: 107,
            output_tokens: 23,
          });
          expect(ms(afterMore.updated_at)).toBeGreaterThan(ms(afterFirst.updated_at));
          expect(afterMore.message_count).toBe((await allMessages(session.id)).length);
        });

        it('sums the prompt-cache reads and writes a call reports, and a reset clears them', async () => {
          const session = await newSession();
          expect(session).toMatchObject({ cache_read_tokens: 0, cache_write_tokens: 0 });
          await store.appendMessages(session.id, conversation(1), {
            usage: {
              input_tokens: 900,
              output_tokens: 10,
              cache_read_tokens: 0,
              cache_write_tokens: 800,
            },
          });
          await store.appendMessages(session.id, conversation(1), {
            usage: {
              input_tokens: 950,
              output_tokens: 10,
              cache_read_tokens: 800,
              cache_write_tokens: 100,
            },
          });
          // A provider that reports no cache counts adds nothing to them.
          await store.appendMessages(session.id, conversation(1), {
            usage: { input_tokens: 5, output_tokens: 1 },
          });
          expect(await store.findSession(session.id)).toMatchObject({
            input_tokens: 1855,
            cache_read_tokens: 800,
            cache_write_tokens: 900,
          });
          await store.resetSession(session.id);
          expect(await store.findSession(session.id)).toMatchObject({
            cache_read_tokens: 0,
            cache_write_tokens: 0,
          });
        });

        it('records the reported prompt tokens with the seq the prompt covered', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [{ role: 'user', content: 'question' }]);
          await store.appendMessages(session.id, [{ role: 'assistant', content: 'answer' }], {
            usage: { input_tokens: 50, output_tokens: 5 },
            promptTokens: 50,
          });
          expect(await store.findSession(session.id)).toMatchObject({
            last_prompt_tokens: 50,
            last_prompt_seq: 2,
          });
          // A write without a reported prompt leaves the estimate's base alone.
          await store.appendMessages(session.id, [{ role: 'user', content: 'next' }]);
          expect(await store.findSession(session.id)).toMatchObject({
            last_prompt_tokens: 50,
            last_prompt_seq: 2,
          });
        });

        it('round-trips tool_calls, tool_call_id and name, and null content', async () => {
          const session = await newSession();
          const sent: ChatMessage[] = [
            { role: 'user', content: 'What time is it in Paris and Tokyo?' },
            {
              role: 'assistant',
              content: null,
              tool_calls: [
                {
                  id: 'call_1',
                  type: 'function',
                  function: { name: 'current_time', arguments: '{"tz":"Europe/Paris"}' },
                },
                {
                  id: 'call_2',
                  type: 'function',
                  function: { name: 'current_time', arguments: '{"tz":"Asia/Tokyo"}' },
                },
              ],
            },
            { role: 'tool', tool_call_id: 'call_1', name: 'current_time', content: '10:00' },
            { role: 'tool', tool_call_id: 'call_2', name: 'current_time', content: '17:00' },
            {
              role: 'assistant',
              content: 'Let me check one more.',
              tool_calls: [
                { id: 'call_3', type: 'function', function: { name: 'ask_user', arguments: '' } },
              ],
            },
            { role: 'user', content: 'Ünïcödé ✓ 🧭 "quotes" \'single\' \\ back\nslash' },
          ];
          const stored = await store.appendMessages(session.id, sent);
          const expected = sent.map((m, i) => ({
            ...m,
            session_id: session.id,
            seq: i + 2,
            created_at: stored[i]!.created_at,
          }));
          expect(stored).toEqual(expected.map(withTokens));
          expect((await allMessages(session.id)).slice(1)).toEqual(expected);
          expect((await store.loadContext(session.id, 0)).tail).toEqual(expected.map(withTokens));
          const plain = (await allMessages(session.id))[1]!;
          expect('tool_calls' in plain).toBe(false);
          expect('tool_call_id' in plain).toBe(false);
        });

        it('stores large contents intact', async () => {
          const session = await newSession();
          const big = 'x'.repeat(300_000) + 'end';
          await store.appendMessages(session.id, [
            { role: 'tool', content: big, tool_call_id: 'c' },
          ]);
          expect((await allMessages(session.id))[1]?.content).toBe(big);
        });

        it('appending nothing changes nothing', async () => {
          const session = await newSession();
          expect(await store.appendMessages(session.id, [])).toEqual([]);
          expect((await store.findSession(session.id))?.message_count).toBe(1);
          expect(await allMessages(session.id)).toHaveLength(1);
        });

        it('is all or nothing: a batch with an invalid message stores none of it', async () => {
          const session = await newSession();
          const bad = [
            { role: 'user', content: 'fine' },
            { role: 'narrator', content: 'not a role' },
          ] as unknown as ChatMessage[];
          await rejectionOf(store.appendMessages(session.id, bad));
          expect(await allMessages(session.id)).toHaveLength(1);
          expect(await store.findSession(session.id)).toEqual(session);
        });

        it('rejects messages for an unknown session', async () => {
          await rejectionOf(store.appendMessages('sess_doesnotexist', conversation(1)));
          expect(await allMessages('sess_doesnotexist')).toEqual([]);
        });
      });

      describe('listMessages', () => {
        it('pages by seq with afterSeq (keyset) and never leaks another session', async () => {
          const session = await newSession();
          const other = await newSession();
          await store.appendMessages(session.id, conversation(10));
          await store.appendMessages(other.id, conversation(10, 'other'));

          const pages: number[][] = [];
          let afterSeq = 0;
          for (;;) {
            const page = await store.listMessages(session.id, { afterSeq, limit: 4 });
            if (page.length === 0) break;
            expect(page.length).toBeLessThanOrEqual(4);
            for (const m of page) expect(m.session_id).toBe(session.id);
            pages.push(page.map((m) => m.seq));
            afterSeq = page[page.length - 1]!.seq;
          }
          expect(pages).toEqual([
            [1, 2, 3, 4],
            [5, 6, 7, 8],
            [9, 10, 11],
          ]);
          expect(await store.listMessages(session.id, { afterSeq: 11, limit: 4 })).toEqual([]);
          expect(
            (await store.listMessages(session.id, { afterSeq: 5, limit: 2 })).map((m) => m.content),
          ).toEqual(['message 4', 'message 5']);
        });
      });

      describe('firstUserMessages', () => {
        it("gives each session's first user message, cut short, and leaves out sessions without one", async () => {
          const talked = await newSession();
          const quiet = await newSession();
          const reset = await newSession();
          const other = await newSession();
          await store.appendMessages(talked.id, [
            { role: 'user', content: 'Plan a trip to Lyon in March, with trains only' },
            { role: 'assistant', content: 'Gladly.' },
            { role: 'user', content: 'second question' },
          ]);
          await store.appendMessages(other.id, [{ role: 'user', content: 'another session' }]);
          // After a reset the first user message is the one after the reset.
          await store.appendMessages(reset.id, [{ role: 'user', content: 'before the reset' }]);
          await store.resetSession(reset.id);
          await store.appendMessages(reset.id, [{ role: 'user', content: 'after the reset' }]);

          const firsts = await store.firstUserMessages([talked.id, quiet.id, reset.id], 20);
          expect([...firsts.entries()].sort()).toEqual(
            [
              [talked.id, 'Plan a trip to Lyon '],
              [reset.id, 'after the reset'],
            ].sort(),
          );
          expect(firsts.has(quiet.id)).toBe(false);
          expect(firsts.has(other.id)).toBe(false);
          expect(await store.firstUserMessages([], 20)).toEqual(new Map());
          expect(await store.firstUserMessages(['sess_000000000000000000000000'], 20)).toEqual(
            new Map(),
          );
        });
      });

      describe('loadContext / listTail / listMessageMeta', () => {
        async function sessionWithMidSystem(): Promise<SessionRow> {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'u2' }, // 2
            { role: 'assistant', content: 'a3' }, // 3
            { role: 'system', content: 's4' }, // 4
            { role: 'user', content: 'u5' }, // 5
            { role: 'assistant', content: 'a6' }, // 6
          ]);
          return session;
        }

        it('loadContext returns every system message and only non-system messages after the seq', async () => {
          const session = await sessionWithMidSystem();
          const at = async (afterSeq: number) => {
            const { system, tail } = await store.loadContext(session.id, afterSeq);
            return { system: system.map((m) => m.seq), tail: tail.map((m) => m.seq) };
          };
          expect(await at(0)).toEqual({ system: [1, 4], tail: [2, 3, 5, 6] });
          expect(await at(3)).toEqual({ system: [1, 4], tail: [5, 6] });
          expect(await at(4)).toEqual({ system: [1, 4], tail: [5, 6] });
          expect(await at(5)).toEqual({ system: [1, 4], tail: [6] });
          expect(await at(6)).toEqual({ system: [1, 4], tail: [] });
          const { system } = await store.loadContext(session.id, 6);
          expect(system[0]).toMatchObject({ role: 'system', content: 'You are a test assistant.' });
        });

        it('listTail returns the first `limit` non-system messages after the seq', async () => {
          const session = await sessionWithMidSystem();
          const seqs = async (afterSeq: number, limit: number) =>
            (await store.listTail(session.id, afterSeq, limit)).map((m) => m.seq);
          expect(await seqs(0, 100)).toEqual([2, 3, 5, 6]);
          expect(await seqs(0, 3)).toEqual([2, 3, 5]);
          expect(await seqs(3, 1)).toEqual([5]);
          expect(await seqs(6, 10)).toEqual([]);
          const [first] = await store.listTail(session.id, 0, 1);
          expect(first).toEqual(withTokens((await allMessages(session.id))[1]!));
        });

        it('listMessageMeta gives seq, role, chars and tool call ids of the non-system tail', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'hello' }, // 2
            { role: 'system', content: 'extra system text' }, // 3
            {
              role: 'assistant',
              content: 'ok',
              tool_calls: [
                { id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{"q":1}' } },
                { id: 'c2', type: 'function', function: { name: 'add', arguments: '{}' } },
              ],
            }, // 4
            { role: 'tool', tool_call_id: 'c1', name: 'lookup', content: 'result one' }, // 5
            { role: 'tool', tool_call_id: 'c2', name: 'add', content: '' }, // 6
            { role: 'assistant', content: null, tool_calls: [] }, // 7
          ]);
          expect(await store.listMessageMeta(session.id, 0)).toEqual([
            { seq: 2, role: 'user', chars: 5 },
            {
              seq: 4,
              role: 'assistant',
              chars: 2 + ('lookup'.length + '{"q":1}'.length) + ('add'.length + '{}'.length),
              callIds: ['c1', 'c2'],
            },
            { seq: 5, role: 'tool', chars: 10, toolCallId: 'c1' },
            { seq: 6, role: 'tool', chars: 0, toolCallId: 'c2' },
            { seq: 7, role: 'assistant', chars: 0 },
          ]);
          expect((await store.listMessageMeta(session.id, 5)).map((m) => m.seq)).toEqual([6, 7]);
          expect(await store.listMessageMeta(session.id, 7)).toEqual([]);
        });
      });

      describe('searchHistory', () => {
        async function searchable() {
          const session = await newSession();
          const other = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'The quick brown fox jumps' }, // 2
            { role: 'assistant', content: 'over the lazy dog' }, // 3
            {
              role: 'assistant',
              content: null,
              tool_calls: [{ id: 'c', type: 'function', function: { name: 'x', arguments: '{}' } }],
            }, // 4
            { role: 'tool', tool_call_id: 'c', name: 'x', content: 'the ocelot result' }, // 5
          ]);
          await store.appendMessages(other.id, [
            { role: 'user', content: 'a quick zebra and a fox' },
          ]);
          return { session, other };
        }

        it('finds words in the messages of that session only', async () => {
          const { session, other } = await searchable();
          const fox = await store.searchHistory(session.id, 'fox', 10);
          expect(fox.map((h) => [h.seq, h.role])).toEqual([[2, 'user']]);
          expect(fox[0]!.snippet).toContain('fox');
          expect((await store.searchHistory(session.id, 'ocelot', 10)).map((h) => h.seq)).toEqual([
            5,
          ]);
          expect(await store.searchHistory(session.id, 'zebra', 10)).toEqual([]);
          expect((await store.searchHistory(other.id, 'zebra', 10)).map((h) => h.seq)).toEqual([2]);
          expect(await store.searchHistory(session.id, 'nonexistentword', 10)).toEqual([]);
          expect(
            (await store.searchHistory(session.id, 'brown fox', 10)).map((h) => h.seq),
          ).toContain(2);
          expect((await store.searchHistory(session.id, 'QUICK', 10)).map((h) => h.seq)).toEqual([
            2,
          ]);
        });

        it('respects the limit', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(6, 'heron'));
          expect(await store.searchHistory(session.id, 'heron', 100)).toHaveLength(6);
          expect(await store.searchHistory(session.id, 'heron', 2)).toHaveLength(2);
        });

        it('searches compacted messages too', async () => {
          const { session } = await searchable();
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5 }),
          );
          expect((await store.searchHistory(session.id, 'fox', 10)).map((h) => h.seq)).toEqual([2]);
        });

        it('treats FTS syntax characters in the query as text, never throwing', async () => {
          const { session } = await searchable();
          const withFox = [
            '"fox',
            'fox"',
            '"fox"',
            'fox*',
            '*fox',
            'NEAR(fox dog)',
            'NEAR(fox',
            '(fox OR',
            'fox AND',
            'fox NOT',
            '-fox',
            '^fox',
            'fox:',
            'content:fox',
            '{fox}',
            "fox's",
            'fox\u0000',
            'fox; DROP TABLE messages; --',
          ];
          for (const query of withFox) {
            const hits = await store.searchHistory(session.id, query, 10);
            expect(
              hits.map((h) => h.seq),
              query,
            ).toContain(2);
          }
          for (const query of [
            '',
            '   ',
            '*',
            '"',
            '()',
            'AND',
            'OR',
            'NOT',
            'NEAR',
            ':',
            '-',
            "'",
          ]) {
            const hits = await store.searchHistory(session.id, query, 10);
            expect(Array.isArray(hits), query).toBe(true);
          }
          expect(await allMessages(session.id)).toHaveLength(5);
        });
      });

      describe('recallMessages', () => {
        const term = (text: string, prefix = false) => ({ text, prefix });

        it('finds compacted messages of that session only, best match first, never past the pointer', async () => {
          const session = await newSession();
          const other = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'The gym locker code is 4812' }, // 2
            { role: 'assistant', content: 'Noted, the locker' }, // 3
            { role: 'system', content: 'locker rules for the gym' }, // 4
            { role: 'user', content: 'gym locker again, after the pointer' }, // 5
          ]);
          await store.appendMessages(other.id, [{ role: 'user', content: 'gym locker elsewhere' }]);
          const hits = await store.recallMessages(session.id, [term('gym'), term('locker')], 4, 10);
          expect(hits.map((h) => [h.seq, h.role])).toEqual([
            [2, 'user'],
            [3, 'assistant'],
          ]);
          expect(hits[0]).toMatchObject({ content: 'The gym locker code is 4812' });
          expect(typeof hits[0]!.created_at).toBe('string');
          expect(await store.recallMessages(session.id, [term('gym')], 4, 1)).toHaveLength(1);
          expect(await store.recallMessages(session.id, [term('gym')], 0, 10)).toEqual([]);
          expect(await store.recallMessages(session.id, [], 4, 10)).toEqual([]);
        });

        it('matches words of the same stem and numbers, folds case, and ignores terms that are not words', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'The DEPLOYMENTS of release 4812 failed' }, // 2
            { role: 'assistant', content: 'a deploy, deployed' }, // 3
            { role: 'assistant', content: 'deplorable' }, // 4
          ]);
          const seqs = async (text: string) =>
            (await store.recallMessages(session.id, [term(text)], 4, 10)).map((h) => h.seq).sort();
          expect(await seqs('deployment')).toEqual([2]);
          expect(await seqs('deploying')).toEqual([3]);
          expect(await seqs('4812')).toEqual([2]);
          for (const bad of ['"x', "x'", 'a b', 'NEAR(', '*', '']) {
            expect(await store.recallMessages(session.id, [term(bad, true)], 3, 10), bad).toEqual(
              [],
            );
          }
        });

        it("never returns another session's matches, and they never change which of this session's come back", async () => {
          const session = await newSession();
          // Equal lengths, so the order follows how often the word occurs
          // whatever the rest of the index holds.
          await store.appendMessages(session.id, [
            { role: 'user', content: 'heron walk walk walk' }, // 2
            { role: 'assistant', content: 'heron heron heron walk' }, // 3
            { role: 'user', content: 'nothing to see here' }, // 4
            { role: 'assistant', content: 'heron heron walk walk' }, // 5
          ]);
          const recalled = async (limit: number) =>
            (await store.recallMessages(session.id, [term('heron')], 5, limit)).map((h) => h.seq);
          const searched = async (limit: number) =>
            (await store.searchHistory(session.id, 'heron', limit)).map((h) => h.seq);
          const before = [
            await recalled(2),
            await recalled(10),
            await searched(2),
            await searched(10),
          ];
          expect(before).toEqual([
            [3, 5],
            [3, 5, 2],
            [3, 5],
            [3, 5, 2],
          ]);
          // Other sessions full of better matches, earlier and later ids than this session's.
          const others: SessionRow[] = [];
          for (let i = 0; i < 3; i++) {
            const other = await newSession();
            others.push(other);
            await store.appendMessages(
              other.id,
              Array.from({ length: 20 }, () => ({ role: 'user' as const, content: 'heron heron' })),
            );
          }
          await store.appendMessages(session.id, [{ role: 'user', content: 'after the pointer' }]);
          expect([
            await recalled(2),
            await recalled(10),
            await searched(2),
            await searched(10),
          ]).toEqual(before);
          for (const hit of await store.recallMessages(session.id, [term('heron')], 6, 100))
            expect(hit.content).not.toBe('heron heron');
          expect(await store.searchHistory(others[0]!.id, 'heron', 100)).toHaveLength(20);
          expect(await store.recallMessages(others[1]!.id, [term('walk')], 21, 100)).toEqual([]);
        });

        it('clips a long message to RECALL_CONTENT_CHARS characters', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'tool', tool_call_id: 'c', name: 'x', content: `walrus ${'y'.repeat(9_000)}` },
          ]);
          const [hit] = await store.recallMessages(session.id, [term('walrus')], 2, 10);
          expect(hit!.content).toHaveLength(RECALL_CONTENT_CHARS);
        });
      });

      describe('correctRecallTerms', () => {
        const term = (text: string, prefix = false) => ({ text, prefix });

        it('replaces a misspelled word by the word the history holds, and nothing else', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'Did the courier receive the parcel?' }, // 2
            { role: 'assistant', content: 'The courier will receive it tomorrow.' }, // 3
            { role: 'user', content: 'The greenhouse is warm.' }, // 4
          ]);
          const terms = [term('recieve'), term('courier'), term('recei', true), term('4812')];
          expect(await store.correctRecallTerms(session.id, terms, 3)).toEqual([
            term('receive'),
            term('courier'),
            term('recei', true),
            term('4812'),
          ]);
          // A word one message holds is a correction too; nothing is corrected with nothing to search.
          expect(await store.correctRecallTerms(session.id, [term('grenhouse')], 4)).toEqual([
            term('greenhouse'),
          ]);
          expect(await store.correctRecallTerms(session.id, [term('recieve')], 0)).toEqual([
            term('recieve'),
          ]);
        });

        it('keeps a word one message holds, and adds the more common word it may be a typo of', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'Gina won a trophy at the dance contest.' }, // 2
            ...Array.from({ length: 6 }, (_, i) => ({
              role: 'assistant' as const,
              content: `The content of note ${i} is long.`,
            })),
          ]);
          // "contest" is said once: searched as written, "content" besides, after the others.
          expect(
            await store.correctRecallTerms(session.id, [term('contest'), term('dance')], 8),
          ).toEqual([term('contest'), term('dance'), term('content')]);
          // A word no message holds is still replaced.
          expect(await store.correctRecallTerms(session.id, [term('contnet')], 8)).toEqual([
            term('content'),
          ]);
        });
      });

      describe('appendMessagesWithEvents', () => {
        it('stores the messages and one event per message, in one transaction', async () => {
          const session = await newSession();
          const before = await store.listEvents({ afterId: 0, sessionId: session.id, limit: 100 });
          const written = await store.appendMessagesWithEvents(
            session.id,
            [
              { role: 'user', content: 'hi' },
              { role: 'assistant', content: 'hello' },
            ],
            'message.created',
            { usage: { input_tokens: 7, output_tokens: 3 } },
          );
          expect(written.messages.map((m) => m.role)).toEqual(['user', 'assistant']);
          expect(written.events.map((e) => e.data)).toEqual(
            written.messages.map((m) => ({ seq: m.seq, role: m.role, sessionId: session.id })),
          );
          const listed = await store.listEvents({
            afterId: before.at(-1)?.id ?? 0,
            sessionId: session.id,
            limit: 100,
          });
          expect(listed).toEqual(written.events);
          expect((await store.findSession(session.id))!.input_tokens).toBe(7);
        });

        it('stores neither messages nor events when one message is invalid', async () => {
          const session = await newSession();
          const events = (await store.listEvents({ afterId: 0, limit: 10_000 })).length;
          await expect(
            store.appendMessagesWithEvents(
              session.id,
              [
                { role: 'user', content: 'kept?' },
                { role: 'bogus' as 'user', content: 'no' },
              ],
              'message.created',
            ),
          ).rejects.toThrow();
          expect((await store.listEvents({ afterId: 0, limit: 10_000 })).length).toBe(events);
          const messages = await store.listMessages(session.id, { afterSeq: 0, limit: 10 });
          expect(messages.map((m) => m.role)).toEqual(['system']);
        });
      });
    });

    describe('CompactionStore', () => {
      describe('commitCompaction / listCompactions', () => {
        it('applies with the expected size and records the compaction', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10), { promptTokens: 900 });
          const updated = await store.commitCompaction(
            compaction(session.id, {
              expectedSize: 0,
              toSize: 4,
              toSeq: 5,
              summary: 'First summary',
              trigger: 'manual',
              model: 'summariser-1',
              inputChars: 321,
            }),
          );
          expect(updated).toMatchObject({
            id: session.id,
            compact_summary: 'First summary',
            compact_size: 4,
            compact_seq: 5,
            compaction_count: 1,
            message_count: 11,
            last_prompt_tokens: null,
          });
          expect(await store.findSession(session.id)).toEqual(updated);

          const rows = await store.listCompactions(session.id);
          expect(rows).toHaveLength(1);
          expect(rows[0]).toMatchObject({
            session_id: session.id,
            from_size: 0,
            to_size: 4,
            from_seq: 0,
            to_seq: 5,
            previous_summary: null,
            summary: 'First summary',
            trigger: 'manual',
            model: 'summariser-1',
            input_chars: 321,
            summary_chars: 'First summary'.length,
            undone_at: null,
          });
          expect(Number.isNaN(ms(rows[0]!.created_at))).toBe(false);

          const second = await store.commitCompaction(
            compaction(session.id, {
              expectedSize: 4,
              toSize: 8,
              toSeq: 9,
              summary: 'Second summary',
              trigger: 'auto',
            }),
          );
          expect(second).toMatchObject({ compact_size: 8, compact_seq: 9, compaction_count: 2 });
          const both = await store.listCompactions(session.id);
          expect(both.map((r) => [r.from_size, r.to_size, r.from_seq, r.to_seq])).toEqual([
            [0, 4, 0, 5],
            [4, 8, 5, 9],
          ]);
          expect(both[1]).toMatchObject({ previous_summary: 'First summary', trigger: 'auto' });
          expect(both[1]!.id).toBeGreaterThan(both[0]!.id);
          // Raw messages are never deleted by compaction.
          expect(await allMessages(session.id)).toHaveLength(11);
        });

        it('with a stale expected size changes nothing and returns undefined', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10));
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5 }),
          );
          const before = await store.findSession(session.id);
          const rowsBefore = await store.listCompactions(session.id);

          for (const expectedSize of [0, 3, 5, 8]) {
            expect(
              await store.commitCompaction(
                compaction(session.id, { expectedSize, toSize: 8, toSeq: 9, summary: 'lost race' }),
              ),
            ).toBeUndefined();
          }
          expect(await store.findSession(session.id)).toEqual(before);
          expect(await store.listCompactions(session.id)).toEqual(rowsBefore);
        });

        it('with a stale epoch (a reset happened since) changes nothing', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(6));
          const epoch = (await store.findSession(session.id))!.epoch;
          await store.resetSession(session.id);
          await store.appendMessages(session.id, conversation(6));
          const before = await store.findSession(session.id);
          expect(
            await store.commitCompaction(
              compaction(session.id, {
                expectedSize: 0,
                expectedEpoch: epoch,
                toSize: 2,
                toSeq: 3,
              }),
            ),
          ).toBeUndefined();
          expect(await store.findSession(session.id)).toEqual(before);
          expect(await store.listCompactions(session.id)).toEqual([]);

          const applied = await store.commitCompaction(
            compaction(session.id, {
              expectedSize: 0,
              expectedEpoch: before!.epoch,
              toSize: 2,
              toSeq: 3,
            }),
          );
          expect(applied).toMatchObject({ compact_size: 2, compact_seq: 3 });
        });

        it('lets exactly one of two concurrent compactions land', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10));
          const results = await Promise.all([
            store.commitCompaction(
              compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5, summary: 'A' }),
            ),
            store.commitCompaction(
              compaction(session.id, { expectedSize: 0, toSize: 6, toSeq: 7, summary: 'B' }),
            ),
          ]);
          const landed = results.filter((r) => r !== undefined);
          expect(landed).toHaveLength(1);
          const rows = await store.listCompactions(session.id);
          expect(rows).toHaveLength(1);
          expect((await store.findSession(session.id))?.compact_summary).toBe(rows[0]!.summary);
        });

        it('returns undefined for an unknown session', async () => {
          expect(
            await store.commitCompaction(
              compaction('sess_doesnotexist', { expectedSize: 0, toSize: 1, toSeq: 2 }),
            ),
          ).toBeUndefined();
          expect(await store.listCompactions('sess_doesnotexist')).toEqual([]);
        });

        it('lists only the compactions of the given session, oldest first', async () => {
          const a = await newSession();
          const b = await newSession();
          await store.appendMessages(a.id, conversation(6));
          await store.appendMessages(b.id, conversation(6));
          await store.commitCompaction(compaction(a.id, { expectedSize: 0, toSize: 2, toSeq: 3 }));
          await store.commitCompaction(compaction(b.id, { expectedSize: 0, toSize: 2, toSeq: 3 }));
          await store.commitCompaction(compaction(a.id, { expectedSize: 2, toSize: 4, toSeq: 5 }));
          const rows = await store.listCompactions(a.id);
          expect(rows.map((r) => [r.session_id, r.to_size])).toEqual([
            [a.id, 2],
            [a.id, 4],
          ]);
        });
      });

      describe('compaction cost', () => {
        it('records the summary call tokens on the row and sums them on the session', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, [
            { role: 'user', content: 'a' },
            { role: 'assistant', content: 'b' },
            { role: 'user', content: 'c' },
            { role: 'assistant', content: 'd' },
          ]);
          await store.commitCompaction(
            compaction(session.id, {
              expectedSize: 0,
              toSize: 2,
              toSeq: 3,
              inputTokens: 100,
              outputTokens: 10,
            }),
          );
          const after = await store.commitCompaction(
            compaction(session.id, {
              expectedSize: 2,
              toSize: 4,
              toSeq: 5,
              inputTokens: 50,
              outputTokens: 5,
            }),
          );
          expect(after).toMatchObject({
            compaction_input_tokens: 150,
            compaction_output_tokens: 15,
          });
          const rows = await store.listCompactions(session.id);
          expect(rows.map((r) => [r.input_tokens, r.output_tokens])).toEqual([
            [100, 10],
            [50, 5],
          ]);
        });
      });

      describe('setCompactionSuspended', () => {
        it('sets and clears the breaker; an auto compaction keeps it, a manual one clears it', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10));
          await store.setCompactionSuspended(session.id, true);
          expect((await store.findSession(session.id))?.compaction_suspended).toBe(1);
          await store.setCompactionSuspended(session.id, false);
          expect((await store.findSession(session.id))?.compaction_suspended).toBe(0);

          await store.setCompactionSuspended(session.id, true);
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 2, toSeq: 3, trigger: 'auto' }),
          );
          expect((await store.findSession(session.id))?.compaction_suspended).toBe(1);
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 2, toSize: 4, toSeq: 5, trigger: 'manual' }),
          );
          expect((await store.findSession(session.id))?.compaction_suspended).toBe(0);
        });
      });

      describe('undoCompaction', () => {
        it('restores the state before the latest compaction, once', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10));
          const first = await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5, summary: 'S1' }),
          );
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 4, toSize: 8, toSeq: 9, summary: 'S2' }),
          );

          const undone = await store.undoCompaction(session.id);
          expect(undone?.restoredSize).toBe(4);
          expect(undone?.session).toMatchObject({
            compact_summary: 'S1',
            compact_size: 4,
            compact_seq: 5,
            compaction_count: first!.compaction_count,
          });
          expect(await store.findSession(session.id)).toEqual(undone?.session);
          const rows = await store.listCompactions(session.id);
          expect(rows).toHaveLength(2);
          expect(rows[0]!.undone_at).toBeNull();
          expect(Number.isNaN(ms(rows[1]!.undone_at))).toBe(false);

          // A second undo is refused: only the latest compaction can be undone, and S1 is not
          // the latest one (S2 landed after it).
          const stateAfterUndo = await store.findSession(session.id);
          expect(await store.undoCompaction(session.id)).toBeUndefined();
          expect(await store.findSession(session.id)).toEqual(stateAfterUndo);
          expect(await store.listCompactions(session.id)).toEqual(rows);
        });

        it('undoes the only compaction back to no summary', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(4));
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 2, toSeq: 3 }),
          );
          const undone = await store.undoCompaction(session.id);
          expect(undone?.restoredSize).toBe(0);
          expect(undone?.session).toMatchObject({
            compact_summary: null,
            compact_size: 0,
            compact_seq: 0,
            compaction_count: 0,
          });
          expect(await store.undoCompaction(session.id)).toBeUndefined();
        });

        it('after an undo, a new compaction can land and be undone in turn', async () => {
          const session = await newSession();
          await store.appendMessages(session.id, conversation(10));
          await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 4, toSeq: 5, summary: 'S1' }),
          );
          await store.undoCompaction(session.id);
          // A compaction planned before the undo (expecting size 4) lost the race.
          expect(
            await store.commitCompaction(
              compaction(session.id, { expectedSize: 4, toSize: 8, toSeq: 9 }),
            ),
          ).toBeUndefined();
          const again = await store.commitCompaction(
            compaction(session.id, { expectedSize: 0, toSize: 6, toSeq: 7, summary: 'S1b' }),
          );
          expect(again).toMatchObject({ compact_summary: 'S1b', compact_size: 6 });
          expect(await store.undoCompaction(session.id)).toMatchObject({
            restoredSize: 0,
            session: { compact_summary: null, compact_size: 0, compact_seq: 0 },
          });
        });

        it('returns undefined when there is nothing to undo', async () => {
          const session = await newSession();
          expect(await store.undoCompaction(session.id)).toBeUndefined();
          expect(await store.undoCompaction('sess_doesnotexist')).toBeUndefined();
          expect(await store.findSession(session.id)).toEqual(session);
        });
      });
    });

    describe('import across SessionStore, MessageLog and CompactionStore', () => {
      describe('session import', () => {
        it('writes a session under a new id with messages (seq and time kept) and compactions', async () => {
          const original = await newSession();
          const id = await store.createImportedSession({
            ...original,
            compact_summary: 'S',
            compact_size: 1,
            compact_seq: 2,
            compaction_count: 1,
          });
          expect(id).not.toBe(original.id);
          await store.appendImportedMessages(id, [
            { seq: 1, role: 'system', content: 'sys', created_at: '2026-01-01T00:00:00.000Z' },
            { seq: 2, role: 'user', content: 'hello', created_at: '2026-01-01T00:00:01.000Z' },
          ]);
          await store.appendImportedMessages(id, [
            { seq: 5, role: 'assistant', content: 'hi', created_at: '2026-01-01T00:00:02.000Z' },
          ]);
          await store.appendImportedCompactions(id, [
            {
              from_size: 0,
              to_size: 1,
              from_seq: 0,
              to_seq: 2,
              previous_summary: null,
              summary: 'S',
              trigger: 'manual',
              model: 'm',
              input_chars: 5,
              summary_chars: 1,
              input_tokens: 3,
              output_tokens: 1,
              created_at: '2026-01-01T00:00:03.000Z',
              undone_at: null,
            },
          ]);
          const copy = await store.findSession(id);
          expect(copy).toMatchObject({
            message_count: 3,
            last_seq: 5,
            compact_summary: 'S',
            compact_size: 1,
            compact_seq: 2,
          });
          expect((await allMessages(id)).map((m) => [m.seq, m.created_at])).toEqual([
            [1, '2026-01-01T00:00:00.000Z'],
            [2, '2026-01-01T00:00:01.000Z'],
            [5, '2026-01-01T00:00:02.000Z'],
          ]);
          // Imported messages get their token estimate at write, like appended ones.
          const context = await store.loadContext(id, 0);
          expect([...context.system, ...context.tail].map((m) => m.tokens)).toEqual(
            ['sys', 'hello', 'hi'].map((content) =>
              estimateMessageTokens({ role: 'user', content }),
            ),
          );
          expect(await store.listCompactions(id)).toHaveLength(1);
          // New messages continue after the imported seqs.
          const [next] = await store.appendMessages(id, [{ role: 'user', content: 'more' }]);
          expect(next!.seq).toBe(6);
        });
      });
    });

    describe('EventLog', () => {
      describe('appendEvent / listEvents', () => {
        it('appends with increasing ids and lists after an id, optionally for one session', async () => {
          const a = await newSession();
          const b = await newSession();
          const e1 = await store.appendEvent({
            type: 'session.created',
            sessionId: a.id,
            data: { nested: { list: [1, 'two', null, true] }, text: 'ü ✓' },
          });
          const e2 = await store.appendEvent({ type: 'daemon.tick', data: { agent: 'ticker' } });
          const e3 = await store.appendEvent({
            type: 'message.created',
            sessionId: b.id,
            data: {},
          });
          const e4 = await store.appendEvent({
            type: 'message.created',
            sessionId: a.id,
            data: { seq: 2 },
          });

          expect(e1).toMatchObject({
            type: 'session.created',
            session_id: a.id,
            data: { nested: { list: [1, 'two', null, true] }, text: 'ü ✓' },
          });
          expect(e2.session_id).toBeNull();
          expect(Number.isNaN(ms(e1.created_at))).toBe(false);
          expect(e2.id).toBeGreaterThan(e1.id);
          expect(e3.id).toBeGreaterThan(e2.id);
          expect(e4.id).toBeGreaterThan(e3.id);

          const all = await store.listEvents({ afterId: 0, limit: 100 });
          expect(all).toEqual([e1, e2, e3, e4]);
          expect(await store.listEvents({ afterId: e2.id, limit: 100 })).toEqual([e3, e4]);
          expect(await store.listEvents({ afterId: 0, limit: 2 })).toEqual([e1, e2]);
          expect(await store.listEvents({ afterId: e4.id, limit: 100 })).toEqual([]);
          expect(await store.listEvents({ afterId: 0, sessionId: a.id, limit: 100 })).toEqual([
            e1,
            e4,
          ]);
          expect(await store.listEvents({ afterId: e1.id, sessionId: a.id, limit: 100 })).toEqual([
            e4,
          ]);
          expect(await store.listEvents({ afterId: 0, sessionId: a.id, limit: 1 })).toEqual([e1]);
          expect(await store.listEvents({ afterId: 0, sessionId: b.id, limit: 100 })).toEqual([e3]);
          expect(
            await store.listEvents({ afterId: 0, sessionId: 'sess_doesnotexist', limit: 100 }),
          ).toEqual([]);
        });
      });
    });

    describe('TaskStore', () => {
      describe('tasks', () => {
        async function taskIn(
          sessionId: string,
          agentName = 'assistant',
          input = 'do it',
        ): Promise<TaskRow> {
          return store.createTask({ sessionId, agentName, input });
        }

        it('createTask starts a running task; findTask returns it', async () => {
          const session = await newSession({ mode: 'task' });
          const task = await taskIn(session.id, 'assistant', 'Summarise the report');
          expect(task).toMatchObject({
            session_id: session.id,
            agent_name: 'assistant',
            status: 'running',
            input: 'Summarise the report',
            result: null,
            question: null,
            error: null,
            pending_call_id: null,
          });
          expect(task.id).toMatch(/^task_[A-Za-z0-9]+$/);
          expect(Number.isNaN(ms(task.created_at))).toBe(false);
          expect(await store.findTask(task.id)).toEqual(task);
          expect(await store.findTask('task_doesnotexist')).toBeUndefined();
        });

        it('an append for a task run lands only while that task is running', async () => {
          const session = await newSession({ mode: 'task' });
          const task = await taskIn(session.id);
          const first = await store.appendMessagesWithEvents(
            session.id,
            [{ role: 'user', content: 'while running' }],
            'message.created',
            { runningTask: task.id },
          );
          expect(first.messages).toHaveLength(1);
          // Another instance declared the run dead and marked the task interrupted.
          await store.interruptRunningTasks();
          await expect(
            store.appendMessagesWithEvents(
              session.id,
              [{ role: 'assistant', content: 'after waking up' }],
              'message.created',
              { runningTask: task.id },
            ),
          ).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
          const stored = await store.listMessages(session.id, { afterSeq: 0, limit: 10 });
          expect(stored.map((m) => m.content)).not.toContain('after waking up');
          expect((await store.findSession(session.id))!.message_count).toBe(stored.length);
        });

        it('a compaction or memory write for a task run lands only while that task is running', async () => {
          const session = await newSession({ mode: 'task' });
          await store.appendMessages(session.id, conversation(4, 'heron'));
          const task = await taskIn(session.id);
          await store.putMemory('assistant', 'kept', 'before', { runningTask: task.id });
          // Another instance declared the run dead and marked the task interrupted.
          await store.interruptRunningTasks();
          await expect(
            store.commitCompaction({
              ...compaction(session.id, { expectedSize: 0, toSize: 2, toSeq: 2 }),
              runningTask: task.id,
            }),
          ).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
          await expect(
            store.putMemory('assistant', 'late', 'after waking up', { runningTask: task.id }),
          ).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
          await expect(
            store.deleteMemory('assistant', 'kept', { runningTask: task.id }),
          ).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
          const after = (await store.findSession(session.id))!;
          expect([after.compact_size, after.compaction_count]).toEqual([0, 0]);
          expect(await store.listCompactions(session.id)).toEqual([]);
          const notes = await store.listMemory('assistant');
          expect(notes.map((n) => [n.key, n.content])).toEqual([['kept', 'before']]);
          // Without a task, the same writes land (a person's own compaction or note).
          expect(
            await store.commitCompaction(
              compaction(session.id, { expectedSize: 0, toSize: 2, toSeq: 2 }),
            ),
          ).toMatchObject({ compact_size: 2 });
          expect(await store.deleteMemory('assistant', 'kept')).toBe(true);
        });

        it('keeps the approval deadline of a waiting task until a transition clears it', async () => {
          const session = await newSession({ mode: 'task' });
          const task = await taskIn(session.id);
          expect(task.approval_expires_at).toBeNull();
          const at = '2030-01-02T03:04:05.000Z';
          const waiting = await store.transitionTask(task.id, ['running'], {
            status: 'waiting',
            pending_call_id: 'call_1',
            pending_tool: 'deploy',
            approval_expires_at: at,
          });
          expect(waiting!.approval_expires_at).toBe(at);
          const page = await store.listTasks({ status: 'waiting', limit: 10 });
          expect(page.items.find((t) => t.id === task.id)?.approval_expires_at).toBe(at);
          const running = await store.transitionTask(task.id, ['waiting'], {
            status: 'running',
            approval_expires_at: null,
          });
          expect(running!.approval_expires_at).toBeNull();
        });

        it('transitionTask moves only from the allowed statuses', async () => {
          const session = await newSession({ mode: 'task' });
          const task = await taskIn(session.id);

          const waiting = await store.transitionTask(task.id, ['running'], {
            status: 'waiting',
            question: 'Which city?',
            pending_call_id: 'call_ask',
          });
          expect(waiting).toMatchObject({
            id: task.id,
            status: 'waiting',
            question: 'Which city?',
            pending_call_id: 'call_ask',
            input: 'do it',
          });
          expect(await store.findTask(task.id)).toEqual(waiting);

          // Not running any more: a transition from running is refused and changes nothing.
          expect(
            await store.transitionTask(task.id, ['running'], { status: 'completed', result: 'x' }),
          ).toBeUndefined();
          expect(await store.transitionTask(task.id, [], { status: 'failed' })).toBeUndefined();
          expect(await store.findTask(task.id)).toEqual(waiting);

          const resumed = await store.transitionTask(task.id, ['waiting', 'interrupted'], {
            status: 'running',
            question: null,
            pending_call_id: null,
          });
          expect(resumed).toMatchObject({
            status: 'running',
            question: null,
            pending_call_id: null,
          });

          const done = await store.transitionTask(task.id, ['running'], {
            status: 'completed',
            result: 'Paris',
          });
          expect(done).toMatchObject({ status: 'completed', result: 'Paris', error: null });

          const failed = await taskIn(session.id);
          expect(
            await store.transitionTask(failed.id, ['running'], { status: 'failed', error: 'boom' }),
          ).toMatchObject({ status: 'failed', error: 'boom' });
          expect(
            await store.transitionTask('task_doesnotexist', ['running'], { status: 'failed' }),
          ).toBeUndefined();
        });

        it('lets exactly one of several concurrent transitions win', async () => {
          const session = await newSession({ mode: 'task' });
          const task = await taskIn(session.id);
          await store.transitionTask(task.id, ['running'], { status: 'waiting', question: 'q' });
          const results = await Promise.all(
            ['a', 'b', 'c', 'd', 'e'].map((answer) =>
              store.transitionTask(task.id, ['waiting'], { status: 'running', result: answer }),
            ),
          );
          const winners = results.filter((r) => r !== undefined);
          expect(winners).toHaveLength(1);
          expect(await store.findTask(task.id)).toEqual(winners[0]);
        });

        it('findWaitingTaskForSession and findSessionWithWaitingTask find the waiting task of that session only', async () => {
          // Fractions and a large count, so the read's numbers must come back exactly.
          const s1 = await newSession({ mode: 'task', compactCount: 33.3 });
          const s2 = await newSession({ mode: 'task', compactCount: 0.1 + 0.2 });
          await store.addSessionCost(s1.id, 0.1 + 0.2);
          await store.appendMessages(s1.id, [{ role: 'user', content: 'counted' }], {
            usage: { input_tokens: 2 ** 40, output_tokens: 7 },
          });
          const running = await taskIn(s1.id);
          expect(await store.findWaitingTaskForSession(s1.id)).toBeUndefined();
          const waiting = await taskIn(s1.id);
          await store.transitionTask(waiting.id, ['running'], { status: 'waiting', question: 'q' });
          const elsewhere = await taskIn(s2.id);
          await store.transitionTask(elsewhere.id, ['running'], { status: 'completed' });

          expect((await store.findWaitingTaskForSession(s1.id))?.id).toBe(waiting.id);
          expect(await store.findWaitingTaskForSession(s2.id)).toBeUndefined();
          // Read at once with the session, each exactly as read on its own.
          expect(await store.findSessionWithWaitingTask(s1.id)).toEqual({
            session: await store.findSession(s1.id),
            waitingTask: await store.findWaitingTaskForSession(s1.id),
          });
          expect(await store.findSessionWithWaitingTask(s2.id)).toEqual({
            session: await store.findSession(s2.id),
            waitingTask: undefined,
          });
          expect(await store.findSessionWithWaitingTask('sess_missing')).toEqual({
            session: undefined,
            waitingTask: undefined,
          });
          await store.transitionTask(waiting.id, ['waiting'], { status: 'cancelled' });
          expect(await store.findWaitingTaskForSession(s1.id)).toBeUndefined();
          expect((await store.findTask(running.id))?.status).toBe('running');
        });

        it('interruptRunningTasks marks only running tasks interrupted, with an error', async () => {
          const session = await newSession({ mode: 'task' });
          const r1 = await taskIn(session.id);
          const r2 = await taskIn(session.id);
          const waiting = await taskIn(session.id);
          const done = await taskIn(session.id);
          await store.transitionTask(waiting.id, ['running'], { status: 'waiting', question: 'q' });
          await store.transitionTask(done.id, ['running'], { status: 'completed', result: 'ok' });
          const waitingBefore = await store.findTask(waiting.id);
          const doneBefore = await store.findTask(done.id);

          expect(await store.interruptRunningTasks()).toBe(2);
          for (const id of [r1.id, r2.id]) {
            const row = await store.findTask(id);
            expect(row?.status).toBe('interrupted');
            expect(row?.error).toEqual(expect.any(String));
            expect(row?.error?.length).toBeGreaterThan(0);
          }
          expect(await store.findTask(waiting.id)).toEqual(waitingBefore);
          expect(await store.findTask(done.id)).toEqual(doneBefore);
          expect(await store.interruptRunningTasks()).toBe(0);

          // An interrupted task can be resumed.
          expect(
            await store.transitionTask(r1.id, ['interrupted'], { status: 'running', error: null }),
          ).toMatchObject({ status: 'running', error: null });
        });

        it('listTasks filters by status, agent and session and pages with a cursor', async () => {
          const session = await newSession({ mode: 'task' });
          const created: TaskRow[] = [];
          for (let i = 0; i < 7; i++) {
            created.push(await taskIn(session.id, i % 2 === 0 ? 'alpha' : 'beta', `input ${i}`));
          }
          await store.transitionTask(created[0]!.id, ['running'], { status: 'completed' });
          await store.transitionTask(created[3]!.id, ['running'], { status: 'completed' });

          const all = await store.listTasks({ limit: 100 });
          expect(all.nextCursor).toBeNull();
          expect(all.items.map((t) => t.id).sort()).toEqual(created.map((t) => t.id).sort());
          for (let i = 1; i < all.items.length; i++) {
            expect(ms(all.items[i - 1]!.created_at)).toBeGreaterThanOrEqual(
              ms(all.items[i]!.created_at),
            );
          }

          const ids = async (filter: Parameters<Store['listTasks']>[0]) =>
            (await store.listTasks(filter)).items.map((t) => t.id).sort();
          expect(await ids({ status: 'completed', limit: 100 })).toEqual(
            [created[0]!.id, created[3]!.id].sort(),
          );
          expect(await ids({ agentName: 'beta', limit: 100 })).toEqual(
            [created[1]!.id, created[3]!.id, created[5]!.id].sort(),
          );
          expect(await ids({ agentName: 'alpha', status: 'running', limit: 100 })).toEqual(
            [created[2]!.id, created[4]!.id, created[6]!.id].sort(),
          );
          expect(await ids({ status: 'failed', limit: 100 })).toEqual([]);

          for (const limit of [1, 2, 3, 7, 8]) {
            const seen: string[] = [];
            let cursor: string | undefined;
            let pages = 0;
            do {
              const page = await store.listTasks({ limit, cursor });
              pages += 1;
              if (page.nextCursor !== null) expect(page.items).toHaveLength(limit);
              seen.push(...page.items.map((t) => t.id));
              cursor = page.nextCursor ?? undefined;
            } while (cursor !== undefined && pages < 20);
            expect(seen).toEqual(all.items.map((t) => t.id));
          }

          const filtered: string[] = [];
          let cursor: string | undefined;
          do {
            const page = await store.listTasks({ agentName: 'alpha', limit: 2, cursor });
            filtered.push(...page.items.map((t) => t.id));
            cursor = page.nextCursor ?? undefined;
          } while (cursor !== undefined);
          expect(filtered.sort()).toEqual(
            [created[0]!.id, created[2]!.id, created[4]!.id, created[6]!.id].sort(),
          );

          await expectCairnError(
            store.listTasks({ limit: 2, cursor: 'garbage' }),
            'VALIDATION_ERROR',
          );

          // By session: the tasks of one conversation, whatever else the agent runs.
          const other = await newSession({ mode: 'task' });
          const elsewhere = await taskIn(other.id, 'alpha', 'input elsewhere');
          expect(await ids({ sessionId: other.id, limit: 100 })).toEqual([elsewhere.id]);
          expect(await ids({ sessionId: session.id, agentName: 'beta', limit: 100 })).toEqual(
            [created[1]!.id, created[3]!.id, created[5]!.id].sort(),
          );
        });
      });
    });

    describe('DaemonLeaseStore', () => {
      describe('daemon leases', () => {
        const t0 = new Date('2030-01-01T00:00:00.000Z');
        const at = (offsetMs: number) => new Date(t0.getTime() + offsetMs);

        it('records the next run', async () => {
          expect(await store.findDaemonState('ticker')).toBeUndefined();
          await store.setDaemonNextRun('ticker', at(60_000));
          const state = await store.findDaemonState('ticker');
          expect(state).toMatchObject({
            agent_name: 'ticker',
            last_run_at: null,
            lease_owner: null,
            lease_expires: null,
          });
          expect(ms(state!.next_run_at)).toBe(at(60_000).getTime());
          await store.setDaemonNextRun('ticker', null);
          expect((await store.findDaemonState('ticker'))?.next_run_at).toBeNull();
          expect(await store.findDaemonState('other')).toBeUndefined();
        });

        it('with onlyIfDue, claims only a slot that is due: a slot a peer ran is not run again', async () => {
          // Unset next run: due.
          expect(await store.claimDaemonLease('slotted', 'A', t0, 60_000, true)).toBe(true);
          expect(await store.finishDaemonRun('slotted', 'A', at(1_000), at(10_000))).toBe(true);
          // The lease is free, but the next slot is not due yet.
          expect(await store.claimDaemonLease('slotted', 'B', at(2_000), 60_000, true)).toBe(false);
          // A manual tick (no slot) may still run.
          expect(await store.claimDaemonLease('slotted', 'B', at(2_000), 60_000)).toBe(true);
          expect(await store.finishDaemonRun('slotted', 'B', at(3_000), at(10_000))).toBe(true);
          expect(await store.claimDaemonLease('slotted', 'C', at(10_000), 60_000, true)).toBe(true);
          expect((await store.findDaemonState('slotted'))?.lease_owner).toBe('C');
        });

        it('gives the lease to one owner until it expires or is released', async () => {
          expect(await store.claimDaemonLease('ticker', 'A', t0, 60_000)).toBe(true);
          let state = await store.findDaemonState('ticker');
          expect(state?.lease_owner).toBe('A');
          expect(ms(state!.lease_expires)).toBe(at(60_000).getTime());

          expect(await store.claimDaemonLease('ticker', 'B', at(1_000), 60_000)).toBe(false);
          expect((await store.findDaemonState('ticker'))?.lease_owner).toBe('A');
          // The holder may renew.
          expect(await store.claimDaemonLease('ticker', 'A', at(2_000), 60_000)).toBe(true);
          // Another agent's lease is independent.
          expect(await store.claimDaemonLease('other', 'B', at(2_000), 60_000)).toBe(true);

          // After expiry another owner takes over, and the stale holder cannot finish.
          expect(await store.claimDaemonLease('ticker', 'B', at(63_000), 60_000)).toBe(true);
          expect(await store.finishDaemonRun('ticker', 'A', at(64_000), at(120_000))).toBe(false);
          state = await store.findDaemonState('ticker');
          expect(state).toMatchObject({ lease_owner: 'B', last_run_at: null });

          expect(await store.finishDaemonRun('ticker', 'B', at(65_000), at(120_000))).toBe(true);
          state = await store.findDaemonState('ticker');
          expect(state).toMatchObject({ lease_owner: null, lease_expires: null });
          expect(ms(state!.last_run_at)).toBe(at(65_000).getTime());
          expect(ms(state!.next_run_at)).toBe(at(120_000).getTime());

          // Released: anyone may claim it again straight away.
          expect(await store.claimDaemonLease('ticker', 'A', at(66_000), 60_000)).toBe(true);
          expect(await store.finishDaemonRun('ticker', 'A', at(67_000), null)).toBe(true);
          expect((await store.findDaemonState('ticker'))?.next_run_at).toBeNull();
          expect(await store.finishDaemonRun('nobody', 'A', at(67_000), null)).toBe(false);
        });

        it('releaseDaemonLeases frees every held lease and keeps the schedule', async () => {
          await store.setDaemonNextRun('ticker', at(60_000));
          expect(await store.claimDaemonLease('ticker', 'dead', t0, 15 * 60_000)).toBe(true);
          expect(await store.claimDaemonLease('other', 'dead', t0, 15 * 60_000)).toBe(true);
          expect(await store.releaseDaemonLeases()).toBe(2);
          expect(await store.findDaemonState('ticker')).toMatchObject({
            lease_owner: null,
            lease_expires: null,
          });
          expect(ms((await store.findDaemonState('ticker'))!.next_run_at)).toBe(
            at(60_000).getTime(),
          );
          // Free now, long before the dead holder's lease would have expired.
          expect(await store.claimDaemonLease('ticker', 'alive', at(1_000), 60_000)).toBe(true);
          expect(await store.releaseDaemonLeases()).toBe(1);
          expect(await store.releaseDaemonLeases()).toBe(0);
        });

        it('lets exactly one of several concurrent claims win', async () => {
          const results = await Promise.all(
            ['A', 'B', 'C', 'D'].map((owner) =>
              store.claimDaemonLease('ticker', owner, t0, 30_000),
            ),
          );
          expect(results.filter(Boolean)).toHaveLength(1);
          const winner = ['A', 'B', 'C', 'D'][results.indexOf(true)];
          expect((await store.findDaemonState('ticker'))?.lease_owner).toBe(winner);
        });
      });
    });

    describe('MemoryStore', () => {
      describe('memory', () => {
        it('putMemory inserts, then updates in place keeping created_at', async () => {
          const first = await store.putMemory('assistant', 'prefs', 'Likes strong coffee');
          expect(first).toMatchObject({
            agent_name: 'assistant',
            key: 'prefs',
            content: 'Likes strong coffee',
          });
          expect(first.updated_at).toBe(first.created_at);
          await tick();
          const second = await store.putMemory('assistant', 'prefs', 'Prefers green tea now');
          expect(second).toMatchObject({ key: 'prefs', content: 'Prefers green tea now' });
          expect(second.created_at).toBe(first.created_at);
          expect(ms(second.updated_at)).toBeGreaterThan(ms(first.updated_at));
          expect(await store.listMemory('assistant')).toEqual([second]);
        });

        it('lists an agent’s notes newest first, and only that agent’s', async () => {
          await store.putMemory('assistant', 'a', 'first');
          await tick();
          await store.putMemory('assistant', 'b', 'second');
          await tick();
          await store.putMemory('researcher', 'c', 'elsewhere');
          await tick();
          await store.putMemory('assistant', 'c', 'third');
          expect((await store.listMemory('assistant')).map((n) => n.key)).toEqual(['c', 'b', 'a']);
          await tick();
          await store.putMemory('assistant', 'a', 'first, updated');
          expect((await store.listMemory('assistant')).map((n) => n.key)).toEqual(['a', 'c', 'b']);
          expect((await store.listMemory('researcher')).map((n) => n.content)).toEqual([
            'elsewhere',
          ]);
          expect(await store.listMemory('nobody')).toEqual([]);
          expect((await store.listMemory('assistant', '')).map((n) => n.key)).toEqual([
            'a',
            'c',
            'b',
          ]);
          expect(await store.listMemory('assistant', '   ')).toHaveLength(3);
        });

        it('searches notes by words, following updates and deletes', async () => {
          await store.putMemory(
            'assistant',
            'prefs',
            'The user likes strong coffee in the morning',
          );
          await store.putMemory('assistant', 'pets', 'Has a cat named Miso');
          await store.putMemory('researcher', 'coffee', 'Researcher also tracks coffee');

          expect((await store.listMemory('assistant', 'coffee')).map((n) => n.key)).toEqual([
            'prefs',
          ]);
          expect((await store.listMemory('assistant', 'miso')).map((n) => n.key)).toEqual(['pets']);
          expect((await store.listMemory('assistant', 'cat')).map((n) => n.key)).toEqual(['pets']);
          expect(await store.listMemory('assistant', 'giraffe')).toEqual([]);
          for (const query of ['"coffee', 'coffee*', 'NEAR(coffee', '(coffee', 'coffee AND', '-']) {
            const hits = await store.listMemory('assistant', query);
            if (query !== '-')
              expect(
                hits.map((n) => n.key),
                query,
              ).toEqual(['prefs']);
            else expect(Array.isArray(hits)).toBe(true);
          }

          await store.putMemory('assistant', 'prefs', 'The user switched to tea');
          expect(await store.listMemory('assistant', 'coffee')).toEqual([]);
          expect((await store.listMemory('assistant', 'tea')).map((n) => n.key)).toEqual(['prefs']);

          expect(await store.deleteMemory('assistant', 'pets')).toBe(true);
          expect(await store.deleteMemory('assistant', 'pets')).toBe(false);
          expect(await store.listMemory('assistant', 'miso')).toEqual([]);
          expect((await store.listMemory('assistant')).map((n) => n.key)).toEqual(['prefs']);
          // Deleting by key is scoped to the agent.
          expect(await store.deleteMemory('assistant', 'coffee')).toBe(false);
          expect(await store.listMemory('researcher')).toHaveLength(1);
        });
      });
    });

    describe('PreparedCompactionStore', () => {
      const summaryFor = (sessionId: string, holder: string, expectedSize = 0) => ({
        sessionId,
        holder,
        expectedSize,
        expectedEpoch: 0,
        messages: 2,
        toSize: expectedSize + 2,
        toSeq: 2,
        summary: `summary by ${holder}`,
        model: 'fake',
        inputChars: 40,
        inputTokens: 12,
        outputTokens: 5,
        dropped: [{ text: 'INV-7', kind: 'identifier' as const, seq: 1 }],
      });
      const claim = (sessionId: string, holder: string, expectedSize = 0) =>
        store.claimPreparation({
          sessionId,
          holder,
          expectedSize,
          expectedEpoch: 0,
          staleAfterMs: 60_000,
        });

      it('one holder per pointer: a live holder keeps its claim, and only the holder stores the summary', async () => {
        const session = await newSession();
        await store.heartbeatInstance('inst_a');
        expect(await claim(session.id, 'inst_a')).toBe(true);
        expect(await claim(session.id, 'inst_b')).toBe(false);
        expect(await store.finishPreparation(summaryFor(session.id, 'inst_b'))).toBe(false);
        expect((await store.findPreparation(session.id))?.summary).toBeNull();
        expect(await store.finishPreparation(summaryFor(session.id, 'inst_a'))).toBe(true);
        const ready = await store.findPreparation(session.id);
        expect(ready).toMatchObject({
          holder: 'inst_a',
          expected_size: 0,
          messages: 2,
          to_size: 2,
          summary: 'summary by inst_a',
          input_tokens: 12,
          output_tokens: 5,
          dropped: [{ text: 'INV-7', kind: 'identifier', seq: 1 }],
        });
        expect(ready?.ready_at).not.toBeNull();
        // Ready for this pointer: nobody prepares it again, not even a peer whose holder is gone.
        await store.removeInstance('inst_a');
        expect(await claim(session.id, 'inst_b')).toBe(false);
      });

      it('a claim whose holder stopped heartbeating is taken over, and the late holder stores nothing', async () => {
        const session = await newSession();
        expect(await claim(session.id, 'inst_gone')).toBe(true);
        // No heartbeat row for inst_gone: it is not a live instance.
        expect(await claim(session.id, 'inst_b')).toBe(true);
        expect(await store.finishPreparation(summaryFor(session.id, 'inst_gone'))).toBe(false);
        expect(await store.finishPreparation(summaryFor(session.id, 'inst_b'))).toBe(true);
        expect((await store.findPreparation(session.id))?.holder).toBe('inst_b');
      });

      it('a claim for another pointer replaces a stale preparation; drop removes only the given holder', async () => {
        const session = await newSession();
        await store.heartbeatInstance('inst_a');
        expect(await claim(session.id, 'inst_a')).toBe(true);
        expect(await store.finishPreparation(summaryFor(session.id, 'inst_a'))).toBe(true);
        // The session was compacted meanwhile (size 10): the old summary is for a moved pointer.
        expect(await claim(session.id, 'inst_b', 10)).toBe(true);
        expect(await store.findPreparation(session.id)).toMatchObject({
          holder: 'inst_b',
          expected_size: 10,
          summary: null,
          ready_at: null,
        });
        await store.dropPreparation(session.id, 'inst_a');
        expect(await store.findPreparation(session.id)).toBeDefined();
        await store.dropPreparation(session.id);
        expect(await store.findPreparation(session.id)).toBeUndefined();
        await store.removeInstance('inst_a');
      });

      it('goes with its session', async () => {
        const session = await newSession();
        expect(await claim(session.id, 'inst_a')).toBe(true);
        expect(await store.deleteSession(session.id)).toBe(true);
        expect(await store.findPreparation(session.id)).toBeUndefined();
      });
    });

    describe('InstanceStore', () => {
      it('heartbeats and removal are idempotent; with nothing running nothing is interrupted', async () => {
        await store.heartbeatInstance('inst_x');
        await store.heartbeatInstance('inst_x');
        expect(await store.interruptOrphanedTasks({ self: 'inst_x', staleAfterMs: 1_000 })).toBe(0);
        await store.removeInstance('inst_x');
        await store.removeInstance('inst_x');
      });

      it('a store opened as an instance owns the tasks it sets running', async () => {
        const a = await fixture.openInstance('inst_a');
        const b = await fixture.openInstance('inst_b');
        const session = await newSession({ mode: 'task' });
        const task = await a.createTask({
          sessionId: session.id,
          agentName: 'assistant',
          input: 'x',
        });
        expect(task.owner_instance).toBe('inst_a');
        await a.transitionTask(task.id, ['running'], { status: 'interrupted' });
        const resumed = await b.transitionTask(task.id, ['interrupted'], { status: 'running' });
        expect(resumed?.owner_instance).toBe('inst_b');
        // A running task moves on only by its owner: a run of inst_a that outlived
        // being declared dead cannot settle what inst_b runs now.
        expect(
          await a.transitionTask(task.id, ['running'], { status: 'completed' }),
        ).toBeUndefined();
        expect((await store.findTask(task.id))!.status).toBe('running');
        // Other transitions leave the owner as it is.
        const waiting = await b.transitionTask(task.id, ['running'], { status: 'waiting' });
        expect(waiting?.owner_instance).toBe('inst_b');
        // Appends for inst_a's run are refused; inst_b's own land.
        await b.transitionTask(task.id, ['waiting'], { status: 'running' });
        const append = (by: typeof a) =>
          by.appendMessagesWithEvents(
            session.id,
            [{ role: 'user', content: 'x' }],
            'message.created',
            { runningTask: task.id },
          );
        await expect(append(a)).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
        expect((await append(b)).messages).toHaveLength(1);
      });

      it('interruptOrphanedTasks interrupts only tasks of gone or stale owners, never a live peer or self', async () => {
        const live = await fixture.openInstance('inst_live');
        const gone = await fixture.openInstance('inst_gone');
        const self = await fixture.openInstance('inst_self');
        await live.heartbeatInstance('inst_live');
        await self.heartbeatInstance('inst_self');
        await gone.heartbeatInstance('inst_gone');
        const session = await newSession({ mode: 'task' });
        const input = { sessionId: session.id, agentName: 'assistant', input: 'x' };
        const ofLive = await live.createTask(input);
        const ofGone = await gone.createTask(input);
        const ofSelf = await self.createTask(input);
        const unowned = await store.createTask(input);
        const doneOfGone = await gone.createTask(input);
        await gone.transitionTask(doneOfGone.id, ['running'], { status: 'completed' });

        // Everyone heartbeat just now: only the unowned task has no live owner.
        expect(await self.interruptOrphanedTasks({ self: 'inst_self', staleAfterMs: 60_000 })).toBe(
          1,
        );
        expect((await store.findTask(unowned.id))?.status).toBe('interrupted');

        // inst_gone is removed (its row is gone): its running task is orphaned.
        await gone.removeInstance('inst_gone');
        expect(await self.interruptOrphanedTasks({ self: 'inst_self', staleAfterMs: 60_000 })).toBe(
          1,
        );
        const interrupted = await store.findTask(ofGone.id);
        expect(interrupted?.status).toBe('interrupted');
        expect(interrupted?.error).toEqual(expect.any(String));
        expect((await store.findTask(doneOfGone.id))?.status).toBe('completed');
        expect((await store.findTask(ofLive.id))?.status).toBe('running');

        // A heartbeat older than the limit counts as gone, except for self.
        await live.heartbeatInstance('inst_live');
        expect(await self.interruptOrphanedTasks({ self: 'inst_self', staleAfterMs: 60_000 })).toBe(
          0,
        );
        await tick(50);
        expect(await self.interruptOrphanedTasks({ self: 'inst_self', staleAfterMs: 10 })).toBe(1);
        expect((await store.findTask(ofLive.id))?.status).toBe('interrupted');
        expect((await store.findTask(ofSelf.id))?.status).toBe('running');
      });

      it('releaseOrphanedDaemonLeases frees leases of gone instances only', async () => {
        await store.heartbeatInstance('inst_live');
        await store.heartbeatInstance('inst_self');
        const now = new Date();
        expect(await store.claimDaemonLease('of-live', 'inst_live', now, 60_000)).toBe(true);
        expect(await store.claimDaemonLease('of-self', 'inst_self', now, 60_000)).toBe(true);
        expect(await store.claimDaemonLease('of-gone', 'inst_gone', now, 60_000)).toBe(true);
        const orphans = { self: 'inst_self', staleAfterMs: 60_000 };
        expect(await store.releaseOrphanedDaemonLeases(orphans)).toBe(1);
        expect((await store.findDaemonState('of-gone'))?.lease_owner).toBeNull();
        expect((await store.findDaemonState('of-live'))?.lease_owner).toBe('inst_live');
        expect((await store.findDaemonState('of-self'))?.lease_owner).toBe('inst_self');
        expect(await store.releaseOrphanedDaemonLeases(orphans)).toBe(0);
      });

      it("closeOrphanedDaemonSessions closes only a dead instance's daemon ticks", async () => {
        const live = await fixture.openInstance('inst_live');
        const gone = await fixture.openInstance('inst_gone');
        const self = await fixture.openInstance('inst_self');
        await live.heartbeatInstance('inst_live');
        await self.heartbeatInstance('inst_self');
        await gone.heartbeatInstance('inst_gone');
        const tickOf = async (owner: Store, agentName: string, mode: 'daemon' | 'task') => {
          const session = await newSession({ mode, agentName });
          await owner.createTask({ sessionId: session.id, agentName, input: 'tick' });
          return session;
        };
        const deadTick = await tickOf(gone, 'd-gone', 'daemon');
        const liveTick = await tickOf(live, 'd-live', 'daemon');
        const selfTick = await tickOf(self, 'd-self', 'daemon');
        const goneTaskSession = await tickOf(gone, 'assistant', 'task');
        // A tick that died after its task finished, before closing its session:
        // only its lease, still held by the dead instance, gives it away.
        const deadAfterTask = await newSession({ mode: 'daemon', agentName: 'l-gone' });
        const leasedByLive = await newSession({ mode: 'daemon', agentName: 'l-live' });
        const now = new Date();
        expect(await store.claimDaemonLease('l-gone', 'inst_gone', now, 60_000)).toBe(true);
        expect(await store.claimDaemonLease('l-live', 'inst_live', now, 60_000)).toBe(true);
        const orphans = { self: 'inst_self', staleAfterMs: 60_000 };

        // Every instance heartbeat just now: nothing is orphaned.
        expect(await store.closeOrphanedDaemonSessions(orphans)).toBe(0);

        await gone.removeInstance('inst_gone');
        expect(await self.closeOrphanedDaemonSessions(orphans)).toBe(2);
        const status = async (s: SessionRow) => (await store.findSession(s.id))?.status;
        expect(await status(deadTick)).toBe('closed');
        expect(await status(deadAfterTask)).toBe('closed');
        expect(await status(liveTick)).toBe('active');
        expect(await status(selfTick)).toBe('active');
        expect(await status(leasedByLive)).toBe('active');
        // Not a daemon session: its task is interrupted (resumable), the session stays.
        expect(await status(goneTaskSession)).toBe('active');
        expect(await self.closeOrphanedDaemonSessions(orphans)).toBe(0);
      });

      it("interruptRunningTasks with an owner interrupts only that instance's tasks", async () => {
        const a = await fixture.openInstance('inst_a');
        const b = await fixture.openInstance('inst_b');
        const session = await newSession({ mode: 'task' });
        const input = { sessionId: session.id, agentName: 'assistant', input: 'x' };
        const ofA = await a.createTask(input);
        const ofB = await b.createTask(input);
        expect(await a.interruptRunningTasks('inst_a')).toBe(1);
        expect((await store.findTask(ofA.id))?.status).toBe('interrupted');
        expect((await store.findTask(ofB.id))?.status).toBe('running');
      });
    });

    describe('forkSession', () => {
      it('copies the messages up to atSeq into a new chat session, seqs, times and transcript kept', async () => {
        const parent = await newSession({ title: 'Trip' });
        await store.appendMessages(parent.id, conversation(6), {
          usage: { input_tokens: 10, output_tokens: 5 },
        });
        const outcome = await store.forkSession(parent.id, 5);
        if (outcome.kind !== 'forked') throw new Error(outcome.kind);
        const fork = outcome.session;
        expect(fork.id).not.toBe(parent.id);
        expect(fork).toMatchObject({
          agent_name: 'assistant',
          mode: 'chat',
          status: 'active',
          title: 'Trip',
          parent_session_id: null,
          message_count: 5,
          last_seq: 5,
          input_tokens: 0,
          output_tokens: 0,
          compact_summary: null,
          compact_seq: 0,
        });
        const parentMessages = await allMessages(parent.id);
        expect(await allMessages(fork.id)).toEqual(
          parentMessages.slice(0, 5).map((m) => ({ ...m, session_id: fork.id })),
        );
        // The fork answers to the transcript it holds, and grows after it.
        const visible = parentMessages.slice(1, 5);
        expect(fork.transcript_hash).toBe(transcriptHash(visible));
        expect(
          (await store.findSessionByTranscript('assistant', fork.transcript_hash!, ADMIN_OWNER))
            ?.id,
        ).toBe(fork.id);
        const [next] = await store.appendMessages(fork.id, [{ role: 'user', content: 'branch' }]);
        expect(next!.seq).toBe(6);
        expect(await allMessages(parent.id)).toEqual(parentMessages);
        expect((await store.searchHistory(fork.id, 'message', 10)).length).toBeGreaterThan(0);
      });

      it('forks at the last message without atSeq, and says what is missing otherwise', async () => {
        const parent = await newSession();
        await store.appendMessages(parent.id, conversation(3));
        const whole = await store.forkSession(parent.id);
        expect(whole.kind === 'forked' && whole.session.last_seq).toBe(4);
        expect(await store.forkSession(parent.id, 9)).toEqual({ kind: 'no-message' });
        expect(await store.forkSession(parent.id, 0)).toEqual({ kind: 'no-message' });
        expect(await store.forkSession('sess_missing')).toEqual({ kind: 'no-session' });
        await store.resetSession(parent.id);
        expect(await store.forkSession(parent.id, 3)).toEqual({ kind: 'no-message' });
      });

      it('carries the summary, the pointer and their compactions when atSeq is past the pointer', async () => {
        const parent = await newSession();
        await store.appendMessages(parent.id, conversation(10));
        await store.commitCompaction(
          compaction(parent.id, { expectedSize: 0, toSize: 4, toSeq: 5, summary: 'S1' }),
        );
        const compacted = await store.commitCompaction(
          compaction(parent.id, { expectedSize: 4, toSize: 6, toSeq: 7, summary: 'S2' }),
        );
        const past = await store.forkSession(parent.id, 9);
        if (past.kind !== 'forked') throw new Error(past.kind);
        expect(past.session).toMatchObject({
          compact_summary: 'S2',
          compact_size: 6,
          compact_seq: 7,
          compaction_count: compacted!.compaction_count,
          message_count: 9,
        });
        const copied = await store.listCompactions(past.session.id);
        expect(copied.map((c) => [c.summary, c.to_seq])).toEqual([
          ['S1', 5],
          ['S2', 7],
        ]);
        // The fork's own compaction history works: undo goes back to S1 there only.
        expect((await store.undoCompaction(past.session.id))?.session.compact_summary).toBe('S1');
        expect((await store.findSession(parent.id))?.compact_summary).toBe('S2');

        const before = await store.forkSession(parent.id, 6);
        if (before.kind !== 'forked') throw new Error(before.kind);
        expect(before.session).toMatchObject({
          compact_summary: null,
          compact_size: 0,
          compact_seq: 0,
          compaction_count: 0,
          message_count: 6,
        });
        expect(await store.listCompactions(before.session.id)).toEqual([]);
        const context = await store.loadContext(before.session.id, 0);
        expect(context.tail.map((m) => m.seq)).toEqual([2, 3, 4, 5, 6]);
      });

      it('a fork is deleted on its own, and its parent can go first', async () => {
        const parent = await newSession();
        await store.appendMessages(parent.id, conversation(2));
        const outcome = await store.forkSession(parent.id);
        if (outcome.kind !== 'forked') throw new Error(outcome.kind);
        expect(await store.deleteSession(parent.id)).toBe(true);
        expect((await allMessages(outcome.session.id)).length).toBe(3);
        expect(await store.deleteSession(outcome.session.id)).toBe(true);
      });
    });

    describe('ResponseStore', () => {
      it('saves a response whole, overwrites it by id, and drops it with its session', async () => {
        const session = await newSession();
        const body = { id: 'resp_1_x', output: [{ type: 'function_call', call_id: 'c1' }] };
        await store.saveResponse({ id: 'resp_1_x', session_id: session.id, end_seq: 3, body });
        const found = await store.findResponse('resp_1_x');
        expect(found).toMatchObject({ id: 'resp_1_x', session_id: session.id, end_seq: 3, body });
        expect(Number.isNaN(ms(found!.created_at))).toBe(false);
        await store.saveResponse({
          id: 'resp_1_x',
          session_id: session.id,
          end_seq: 4,
          body: { ...body, status: 'completed' },
        });
        expect(await store.findResponse('resp_1_x')).toMatchObject({
          end_seq: 4,
          body: { status: 'completed' },
        });
        expect(await store.findResponse('resp_nope')).toBeUndefined();
        await store.deleteSession(session.id);
        expect(await store.findResponse('resp_1_x')).toBeUndefined();
      });
    });

    describe('FrontEndChatStore', () => {
      const chat: FrontEndChat = {
        protocol: 'ai-sdk',
        owner: { key: 'key_a', user: 'alice' },
        agentName: 'assistant',
        chatId: 'chat-1',
      };

      it('binds a chat once, finds it by its whole key, and keeps the first binding', async () => {
        const first = await newSession();
        const second = await newSession();
        expect(await store.findFrontEndChat(chat)).toBeUndefined();
        expect(await store.bindFrontEndChat(chat, first.id)).toBe(first.id);
        expect(await store.bindFrontEndChat(chat, second.id)).toBe(first.id);
        expect(await store.findFrontEndChat(chat)).toBe(first.id);
        // Every part of the key scopes the chat: another protocol, key, end user
        // (none included), agent or chat id is another chat.
        for (const other of [
          { ...chat, protocol: 'ag-ui' as const },
          { ...chat, owner: { key: 'key_b', user: 'alice' } },
          { ...chat, owner: { key: null, user: 'alice' } },
          { ...chat, owner: { key: 'key_a', user: 'bob' } },
          { ...chat, owner: { key: 'key_a', user: null } },
          { ...chat, agentName: 'other' },
          { ...chat, chatId: 'chat-2' },
        ])
          expect(await store.findFrontEndChat(other), JSON.stringify(other)).toBeUndefined();
        const admin = { ...chat, owner: ADMIN_OWNER };
        expect(await store.bindFrontEndChat(admin, second.id)).toBe(second.id);
        expect(await store.findFrontEndChat(admin)).toBe(second.id);
        expect(await store.findFrontEndChat(chat)).toBe(first.id);
      });

      it('agrees on one session when two stores bind the same chat at once', async () => {
        const a = await fixture.openInstance('inst_a');
        const b = await fixture.openInstance('inst_b');
        const sessions = await Promise.all([
          newSession(),
          newSession(),
          newSession(),
          newSession(),
        ]);
        const bound = await Promise.all(
          sessions.map((session, i) => (i % 2 === 0 ? a : b).bindFrontEndChat(chat, session.id)),
        );
        expect(new Set(bound).size).toBe(1);
        expect(sessions.map((s) => s.id)).toContain(bound[0]);
        expect(await store.findFrontEndChat(chat)).toBe(bound[0]);
      });

      it('moves a chat to a fork only from the session it is bound to', async () => {
        const parent = await newSession();
        const fork = await newSession();
        const stranger = await newSession();
        await store.bindFrontEndChat(chat, parent.id);
        expect(await store.rebindFrontEndChat(chat, stranger.id, fork.id)).toBe(false);
        expect(await store.findFrontEndChat(chat)).toBe(parent.id);
        expect(await store.rebindFrontEndChat(chat, parent.id, fork.id)).toBe(true);
        expect(await store.findFrontEndChat(chat)).toBe(fork.id);
        expect(
          await store.rebindFrontEndChat({ ...chat, chatId: 'nope' }, fork.id, parent.id),
        ).toBe(false);
      });

      it('drops a mapping with its session, so the chat can be bound afresh', async () => {
        const gone = await newSession();
        const next = await newSession();
        await store.bindFrontEndChat(chat, gone.id);
        expect(await store.deleteSession(gone.id)).toBe(true);
        expect(await store.findFrontEndChat(chat)).toBeUndefined();
        expect(await store.bindFrontEndChat(chat, next.id)).toBe(next.id);
      });
    });

    describe('ChatStreamStore', () => {
      const alive = { self: 'inst_b', staleAfterMs: 60_000 };

      it("records a turn's batches in order and its end; the next turn drops them", async () => {
        const session = await newSession();
        await store.heartbeatInstance('inst_a');
        await store.openChatStream(session.id, 'st_1', 'inst_a');
        expect(await store.findChatStream(session.id, alive)).toEqual({
          streamId: 'st_1',
          instanceId: 'inst_a',
          ended: false,
          stopRequested: false,
          holderLive: true,
        });
        const one = { seq: 1, chunks: '[{"type":"start"}]' };
        const two = { seq: 2, chunks: '[{"type":"finish"}]' };
        expect(await store.writeChatStream(session.id, 'st_1', one, false)).toEqual({
          stopRequested: false,
        });
        await store.writeChatStream(session.id, 'st_1', two, true);
        expect(await store.readChatStream(session.id, 'st_1', 0)).toEqual([one, two]);
        expect(await store.readChatStream(session.id, 'st_1', 1)).toEqual([two]);
        expect(await store.findChatStream(session.id, alive)).toMatchObject({ ended: true });
        // An ended turn is not asked to stop.
        expect(await store.requestChatStop(session.id, alive)).toBe(false);

        await store.openChatStream(session.id, 'st_2', 'inst_a');
        expect(await store.readChatStream(session.id, 'st_1', 0)).toEqual([]);
        expect(await store.findChatStream(session.id, alive)).toMatchObject({
          streamId: 'st_2',
          ended: false,
        });
        // A write of the replaced turn changes nothing.
        await store.writeChatStream(session.id, 'st_1', { seq: 3, chunks: '[]' }, true);
        expect(await store.readChatStream(session.id, 'st_1', 0)).toEqual([]);
        expect(await store.findChatStream(session.id, alive)).toMatchObject({ ended: false });
        expect(await store.findChatStream((await newSession()).id, alive)).toBeUndefined();
      });

      it("asks a live holder's turn to stop, never a dead holder's; the log goes with its session", async () => {
        const session = await newSession();
        await store.heartbeatInstance('inst_a');
        await store.openChatStream(session.id, 'st_live', 'inst_a');
        expect(await store.requestChatStop(session.id, alive)).toBe(true);
        expect(await store.writeChatStream(session.id, 'st_live', undefined, false)).toEqual({
          stopRequested: true,
        });
        expect(await store.findChatStream(session.id, alive)).toMatchObject({
          stopRequested: true,
        });

        // An instance that never heartbeat is gone, unless it is the one asking.
        const orphan = await newSession();
        await store.openChatStream(orphan.id, 'st_dead', 'inst_gone');
        expect(await store.findChatStream(orphan.id, alive)).toMatchObject({ holderLive: false });
        expect(await store.requestChatStop(orphan.id, alive)).toBe(false);
        const self = { self: 'inst_gone', staleAfterMs: 60_000 };
        expect(await store.findChatStream(orphan.id, self)).toMatchObject({ holderLive: true });

        await store.writeChatStream(session.id, 'st_live', { seq: 1, chunks: '[]' }, false);
        expect(await store.deleteSession(session.id)).toBe(true);
        expect(await store.findChatStream(session.id, alive)).toBeUndefined();
        expect(await store.readChatStream(session.id, 'st_live', 0)).toEqual([]);
      });
    });

    describe('CallRecordStore', () => {
      let n = 0;
      /** A call of `sessionId` whose request `body` is encoded against `previous`. */
      function modelCall(
        sessionId: string,
        body: Record<string, unknown>,
        previous: RequestState | undefined,
        fields: Partial<NewModelCall> = {},
      ): { call: NewModelCall; next: RequestState } {
        n += 1;
        const id = fields.id ?? `call_${String(n).padStart(6, '0')}`;
        const encoded = encodeRequest(id, body, previous);
        return {
          next: encoded.next,
          call: {
            id,
            session_id: sessionId,
            turn_seq: 2,
            role: 'main',
            provider: 'openai',
            model: 'm',
            response_model: 'm-2025',
            created_at: new Date().toISOString(),
            latency_ms: 12.5,
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 40,
            cost: 0.25,
            finish_reason: 'stop',
            response: { content: 'ok' },
            error: null,
            fallback_hops: null,
            recalled_seqs: [3, 4],
            wire: true,
            params_ref: encoded.paramsRef,
            chain_id: encoded.chainId,
            base_call_id: encoded.baseCallId,
            base_keep: encoded.baseKeep,
            message_refs: encoded.messageRefs,
            blobs: encoded.blobs,
            ...fields,
          },
        };
      }
      /** An append for a task that is not running: refused, and the call it carries not recorded. */
      async function expectRefusedForTask(
        call: NewModelCall,
        append: (options: AppendOptions) => Promise<unknown>,
      ): Promise<void> {
        await expect(
          append({ runningTask: 'task_not_running', modelCalls: [call] }),
        ).rejects.toMatchObject({ code: 'SESSION_LOCK_LOST' });
        expect(await store.findModelCall(call.id)).toBeUndefined();
      }
      const contentsOf = async (sessionId: string) =>
        (await store.listMessages(sessionId, { afterSeq: 0, limit: 20 })).map((m) => m.content);
      const request = (count: number) => ({
        model: 'm',
        messages: [
          { role: 'system', content: 'S \u0000 "quoted"' },
          ...conversation(count, 'turn'),
        ],
        stream: false,
      });

      it('appendModelCalls stores calls that findModelCall rebuilds exactly, and sums their cost', async () => {
        const session = await newSession();
        const first = modelCall(session.id, request(1), undefined);
        const second = modelCall(session.id, request(3), first.next, {
          response: {
            content: null,
            tool_calls: [{ id: 'c1', type: 'function', function: { name: 't', arguments: '{}' } }],
          },
          fallback_hops: [
            { provider: 'openai', model: 'x', baseURL: null, skipped: false, reason: 'LLM_ERROR' },
          ],
        });
        expect(second.call.base_call_id).toBe(first.call.id);
        await store.appendModelCalls([first.call]);
        await store.appendModelCalls([second.call]);
        const found = await store.findModelCall(second.call.id);
        expect(JSON.stringify(found?.request)).toBe(JSON.stringify(request(3)));
        expect(found).toMatchObject({
          id: second.call.id,
          session_id: session.id,
          turn_seq: 2,
          role: 'main',
          cached_tokens: 40,
          recalled_seqs: [3, 4],
          fallback_hops: [
            { provider: 'openai', model: 'x', baseURL: null, skipped: false, reason: 'LLM_ERROR' },
          ],
          response: second.call.response,
          wire: true,
          error: null,
        });
        expect(JSON.stringify((await store.findModelCall(first.call.id))?.request)).toBe(
          JSON.stringify(request(1)),
        );
        expect((await store.findSession(session.id))?.cost).toBeCloseTo(0.5, 12);
        expect(await store.findModelCall('call_missing')).toBeUndefined();
      });

      it('appendMessagesWithEvents writes its modelCalls with the messages, in one write: both or neither', async () => {
        const session = await newSession();
        const peer = await fixture.openInstance('inst_peer');
        const first = modelCall(session.id, request(1), undefined);
        const second = modelCall(session.id, request(3), first.next, { cost: 0.5 });
        const reply = (content: string) => [{ role: 'assistant' as const, content }];
        await store.appendMessagesWithEvents(session.id, reply('one'), 'message.created', {
          modelCalls: [first.call],
        });
        // Another instance moves the session's head: the next append cannot
        // take it for granted (on Postgres, the locked path) and still writes both.
        await peer.appendMessages(session.id, [{ role: 'user', content: 'from the peer' }]);
        await store.appendMessagesWithEvents(session.id, reply('two'), 'message.created', {
          usage: { input_tokens: 7, output_tokens: 3 },
          modelCalls: [second.call],
        });
        expect(JSON.stringify((await store.findModelCall(first.call.id))?.request)).toBe(
          JSON.stringify(request(1)),
        );
        expect(JSON.stringify((await store.findModelCall(second.call.id))?.request)).toBe(
          JSON.stringify(request(3)),
        );
        expect(await store.findSession(session.id)).toMatchObject({
          input_tokens: 7,
          output_tokens: 3,
        });
        expect((await store.findSession(session.id))?.cost).toBeCloseTo(0.75, 12);

        // Refused (its task is not running): neither the message nor the call.
        await expectRefusedForTask(modelCall(session.id, request(5), second.next).call, (options) =>
          store.appendMessagesWithEvents(session.id, reply('refused'), 'message.created', options),
        );
        expect(await contentsOf(session.id)).toEqual([
          'You are a test assistant.',
          'one',
          'from the peer',
          'two',
        ]);
        expect((await store.findSession(session.id))?.cost).toBeCloseTo(0.75, 12);
      });

      it('appendMessages (no events) keeps the same rules: its modelCalls with it, refused for a task not running', async () => {
        const session = await newSession();
        const first = modelCall(session.id, request(1), undefined);
        await store.appendMessages(session.id, [{ role: 'assistant', content: 'quiet' }], {
          modelCalls: [first.call],
        });
        expect(JSON.stringify((await store.findModelCall(first.call.id))?.request)).toBe(
          JSON.stringify(request(1)),
        );
        await expectRefusedForTask(modelCall(session.id, request(3), first.next).call, (options) =>
          store.appendMessages(session.id, [{ role: 'assistant', content: 'late' }], options),
        );
        expect(await contentsOf(session.id)).toEqual(['You are a test assistant.', 'quiet']);
        const events = await store.listEvents({ afterId: 0, sessionId: session.id, limit: 100 });
        expect(events.map((e) => e.type)).not.toContain('message.created');
      });

      it('appendModelCalls skips the calls of a session deleted meanwhile', async () => {
        const kept = await newSession();
        const gone = await newSession();
        await store.deleteSession(gone.id);
        const a = modelCall(gone.id, request(1), undefined);
        const b = modelCall(kept.id, request(1), undefined, {
          error: { code: 'LLM_ERROR', message: 'no' },
          response: null,
          cost: null,
        });
        await store.appendModelCalls([a.call, b.call]);
        expect(await store.findModelCall(a.call.id)).toBeUndefined();
        const found = await store.findModelCall(b.call.id);
        expect(found?.error).toEqual({ code: 'LLM_ERROR', message: 'no' });
        expect((await store.findSession(kept.id))?.cost).toBe(0);
      });

      it('addSessionCost adds to the session cost', async () => {
        const session = await newSession();
        await store.addSessionCost(session.id, 0.125);
        await store.addSessionCost(session.id, 0.125);
        expect((await store.findSession(session.id))?.cost).toBeCloseTo(0.25, 12);
      });

      it('listModelCalls pages newest first by role, with cursors', async () => {
        const session = await newSession();
        const other = await newSession();
        let previous: RequestState | undefined;
        const ids: string[] = [];
        for (let i = 0; i < 5; i++) {
          const made = modelCall(session.id, request(i + 1), previous, {
            role: i === 2 ? 'title' : 'main',
          });
          previous = made.next;
          ids.push(made.call.id);
          await store.appendModelCalls([made.call]);
          await tick();
        }
        await store.appendModelCalls([modelCall(other.id, request(1), undefined).call]);
        const first = await store.listModelCalls(session.id, { limit: 2 });
        expect(first.items.map((c) => c.id)).toEqual([ids[4], ids[3]]);
        expect(first.items[0]).not.toHaveProperty('request');
        const second = await store.listModelCalls(session.id, {
          limit: 2,
          cursor: first.nextCursor!,
        });
        expect(second.items.map((c) => c.id)).toEqual([ids[2], ids[1]]);
        const third = await store.listModelCalls(session.id, {
          limit: 2,
          cursor: second.nextCursor!,
        });
        expect(third.items.map((c) => c.id)).toEqual([ids[0]]);
        expect(third.nextCursor).toBeNull();
        const titles = await store.listModelCalls(session.id, { limit: 10, role: 'title' });
        expect(titles.items.map((c) => c.id)).toEqual([ids[2]]);
        await expectCairnError(
          store.listModelCalls(session.id, { limit: 2, cursor: 'garbage' }),
          'VALIDATION_ERROR',
        );
      });

      it('pruneModelCalls deletes whole old chains only, and the blobs of sessions left without calls', async () => {
        const old = new Date(Date.now() - 10 * 86_400_000).toISOString();
        const cutoff = new Date(Date.now() - 86_400_000).toISOString();
        const idle = await newSession();
        const active = await newSession();
        const idleA = modelCall(idle.id, request(1), undefined, { created_at: old });
        const idleB = modelCall(idle.id, request(2), idleA.next, { created_at: old });
        // A chain that started long ago but goes on today: kept whole.
        const activeA = modelCall(active.id, request(1), undefined, { created_at: old });
        const activeB = modelCall(active.id, request(2), activeA.next);
        await store.appendModelCalls([idleA.call, idleB.call, activeA.call, activeB.call]);
        expect(await store.pruneModelCalls(cutoff, 10)).toBe(2);
        expect(await store.findModelCall(idleB.call.id)).toBeUndefined();
        expect(JSON.stringify((await store.findModelCall(activeB.call.id))?.request)).toBe(
          JSON.stringify(request(2)),
        );
        expect((await store.findModelCall(activeA.call.id))?.id).toBe(activeA.call.id);
        expect(await store.pruneModelCalls(cutoff, 10)).toBe(0);
        // The idle session's blobs went with its last call: a new call writes them again.
        const again = modelCall(idle.id, request(1), undefined);
        await store.appendModelCalls([again.call]);
        expect(JSON.stringify((await store.findModelCall(again.call.id))?.request)).toBe(
          JSON.stringify(request(1)),
        );
        expect((await store.findSession(idle.id))?.cost).toBeCloseTo(0.75, 12);
      });

      it('pruneModelCalls takes at most maxChains chains per call', async () => {
        const old = new Date(Date.now() - 10 * 86_400_000).toISOString();
        const session = await newSession();
        const calls = [1, 2, 3].map(
          (i) => modelCall(session.id, request(i), undefined, { created_at: old }).call,
        );
        await store.appendModelCalls(calls);
        const cutoff = new Date().toISOString();
        expect(await store.pruneModelCalls(cutoff, 2)).toBe(2);
        expect(await store.pruneModelCalls(cutoff, 2)).toBe(1);
      });
    });

    describe('KeyStore and ownership', () => {
      const keyInput = (name: string, secretHash: string) => ({
        name,
        agents: ['assistant'],
        limits: { requestsPerMinute: 5 },
        secretHash,
      });
      const today = () => new Date().toISOString().slice(0, 10);

      it('creates, finds, lists and revokes keys; the hash is found only while unrevoked', async () => {
        const first = await store.createKey(keyInput('ui', 'a'.repeat(64)));
        await tick();
        const second = await store.createKey({
          name: 'bot',
          agents: '*',
          limits: {},
          secretHash: 'b'.repeat(64),
        });
        expect(first).toMatchObject({
          name: 'ui',
          agents: ['assistant'],
          limits: { requestsPerMinute: 5 },
          last_used_at: null,
          revoked_at: null,
        });
        expect(first.id).toMatch(/^key_/);
        // The API view never carries the hash.
        expect(Object.keys(first)).not.toContain('secret_hash');
        expect(await store.findKey(first.id)).toEqual(first);
        expect(await store.findKey('key_missing')).toBeUndefined();
        expect(await store.findKeyBySecretHash('a'.repeat(64))).toEqual({
          ...first,
          secret_hash: 'a'.repeat(64),
        });
        expect(await store.findKeyBySecretHash('c'.repeat(64))).toBeUndefined();
        expect((await store.listKeys()).map((k) => k.id)).toEqual([second.id, first.id]);

        const revoked = await store.revokeKey(first.id);
        expect(revoked?.revoked_at).not.toBeNull();
        expect(await store.findKeyBySecretHash('a'.repeat(64))).toBeUndefined();
        await tick();
        // A second revoke keeps the first time.
        expect((await store.revokeKey(first.id))?.revoked_at).toBe(revoked?.revoked_at);
        expect(await store.revokeKey('key_missing')).toBeUndefined();
        expect((await store.listKeys()).find((k) => k.id === first.id)?.revoked_at).toBe(
          revoked?.revoked_at,
        );
      });

      it('refuses a second key with the same secret hash', async () => {
        await store.createKey(keyInput('one', 'd'.repeat(64)));
        await expect(store.createKey(keyInput('two', 'd'.repeat(64)))).rejects.toThrow();
        expect(await store.listKeys()).toHaveLength(1);
      });

      it("changes a key's limits and keeps its secret", async () => {
        const key = await store.createKey(keyInput('ui', '9'.repeat(64)));
        const changed = await store.setKeyLimits(key.id, { tokensPerDay: 10, maxStreams: 2 });
        expect(changed?.limits).toEqual({ tokensPerDay: 10, maxStreams: 2 });
        expect((await store.findKeyBySecretHash('9'.repeat(64)))?.limits).toEqual({
          tokensPerDay: 10,
          maxStreams: 2,
        });
        expect(await store.setKeyLimits('key_missing', {})).toBeUndefined();
      });

      it('records when a key was last used', async () => {
        const key = await store.createKey(keyInput('ui', 'e'.repeat(64)));
        await store.touchKey(key.id, '2026-03-01T10:00:00.000Z');
        expect((await store.findKey(key.id))?.last_used_at).toBe('2026-03-01T10:00:00.000Z');
      });

      it('charges the tokens of an owned session to its key for the day, compaction included', async () => {
        const key = await store.createKey(keyInput('ui', 'f'.repeat(64)));
        const owned = await newSession({ owner: { key: key.id, user: 'alice' } });
        const admins = await newSession();
        expect(await store.keyTokensOn(key.id, today())).toBe(0);
        await store.appendMessages(owned.id, conversation(2), {
          usage: { input_tokens: 30, output_tokens: 12 },
        });
        await store.appendMessagesWithEvents(owned.id, conversation(1), 'message.created', {
          usage: { input_tokens: 5, output_tokens: 3 },
        });
        await store.appendMessages(admins.id, conversation(2), {
          usage: { input_tokens: 1_000, output_tokens: 1_000 },
        });
        expect(await store.keyTokensOn(key.id, today())).toBe(50);
        const committed = await store.commitCompaction(
          compaction(owned.id, {
            expectedSize: 0,
            toSize: 2,
            toSeq: 3,
            inputTokens: 100,
            outputTokens: 20,
          }),
        );
        expect(committed).toBeDefined();
        expect(await store.keyTokensOn(key.id, today())).toBe(170);
        expect(await store.keyTokensOn(key.id, '2000-01-01')).toBe(0);
      });

      describe('token reservations', () => {
        const holder = (self: string) => ({ self, staleAfterMs: 60_000 });
        const reserve = (keyId: string, id: string, tokens: number, self = 'inst_self') =>
          store.reserveKeyTokens({ id, keyId, day: today(), tokens, holder: holder(self) });

        it("reserves within a key's tokensPerDay, counting the day's usage and live reservations", async () => {
          const key = await store.createKey({
            ...keyInput('limited', '5'.repeat(64)),
            limits: { tokensPerDay: 100 },
          });
          const owned = await newSession({ owner: { key: key.id, user: null } });
          await store.appendMessages(owned.id, conversation(2), {
            usage: { input_tokens: 30, output_tokens: 10 },
          });
          expect(await reserve(key.id, 'rsv_a', 50)).toEqual({
            keyName: 'limited',
            max: 100,
            spent: 40,
            held: 0,
            reserved: true,
          });
          expect(await reserve(key.id, 'rsv_b', 11)).toMatchObject({
            spent: 40,
            held: 50,
            reserved: false,
          });
          expect(await reserve(key.id, 'rsv_c', 10)).toMatchObject({ reserved: true });
          // Settled to what the call used, then charged: the usage counts once.
          await store.settleReservation('rsv_a', 45);
          expect(await reserve(key.id, 'rsv_d', 0)).toMatchObject({ held: 55 });
          await store.chargeReservation('rsv_a', 45);
          expect(await store.keyTokensOn(key.id, today())).toBe(85);
          expect(await reserve(key.id, 'rsv_e', 0)).toMatchObject({ spent: 85, held: 10 });
          await store.releaseReservation('rsv_c');
          expect(await reserve(key.id, 'rsv_f', 15)).toMatchObject({ held: 0, reserved: true });
          // A key with no tokensPerDay, and an unknown key, reserve nothing.
          const free = await store.createKey(keyInput('free', '6'.repeat(64)));
          expect(await reserve(free.id, 'rsv_g', 1e9)).toEqual({
            keyName: 'free',
            spent: 0,
            held: 0,
            reserved: false,
          });
          expect(await reserve('key_missing', 'rsv_h', 1)).toMatchObject({ reserved: false });
          expect((await reserve('key_missing', 'rsv_h', 1)).max).toBeUndefined();
        });

        it('counts a live holder, and forgets a holder that stopped heartbeating', async () => {
          const key = await store.createKey({
            ...keyInput('shared', '7'.repeat(64)),
            limits: { tokensPerDay: 100 },
          });
          await store.heartbeatInstance('inst_peer');
          expect(await reserve(key.id, 'rsv_peer', 40, 'inst_peer')).toMatchObject({
            reserved: true,
          });
          // Never heartbeats: a holder that died mid-call.
          expect(await reserve(key.id, 'rsv_dead', 60, 'inst_dead')).toMatchObject({
            reserved: true,
          });
          expect(await reserve(key.id, 'rsv_self', 60)).toMatchObject({ held: 40, reserved: true });
          // Gone for good: the dead holder's row was deleted, not just skipped.
          await store.heartbeatInstance('inst_dead');
          expect(await reserve(key.id, 'rsv_probe', 0)).toMatchObject({ held: 100 });
        });

        it('lets concurrent reservers take no more than the day between them', async () => {
          const key = await store.createKey({
            ...keyInput('busy', '8'.repeat(64)),
            limits: { tokensPerDay: 2_000 },
          });
          const results = await Promise.all(
            Array.from({ length: 20 }, (_, i) => reserve(key.id, `rsv_${i}`, 150)),
          );
          expect(results.filter((r) => r.reserved)).toHaveLength(13);
          expect(await reserve(key.id, 'rsv_probe', 0)).toMatchObject({ held: 1_950 });
        });
      });

      it("sums each key's spend from the sessions it owns and its tokens of the day", async () => {
        const a = await store.createKey(keyInput('a', '1'.repeat(64)));
        const b = await store.createKey(keyInput('b', '2'.repeat(64)));
        const idle = await store.createKey(keyInput('idle', '3'.repeat(64)));
        const a1 = await newSession({ owner: { key: a.id, user: 'alice' } });
        const a2 = await newSession({ owner: { key: a.id, user: 'bob' } });
        const b1 = await newSession({ owner: { key: b.id, user: 'alice' } });
        const admins = await newSession();
        await store.addSessionCost(a1.id, 0.25);
        await store.addSessionCost(a2.id, 0.125);
        await store.addSessionCost(a2.id, 0.5);
        await store.addSessionCost(b1.id, 2);
        await store.addSessionCost(admins.id, 100);
        await store.appendMessages(a1.id, conversation(2), {
          usage: { input_tokens: 30, output_tokens: 12 },
        });

        expect(await store.keySpend(a.id, today())).toEqual({ cost: 0.875, tokens: 42 });
        expect(await store.keySpend(a.id, '2000-01-01')).toEqual({ cost: 0.875, tokens: 0 });
        expect(await store.keySpend(b.id, today())).toEqual({ cost: 2, tokens: 0 });
        expect(await store.keySpend(idle.id, today())).toEqual({ cost: 0, tokens: 0 });
        expect(await store.keySpend('key_missing', today())).toEqual({ cost: 0, tokens: 0 });

        expect(Object.fromEntries(await store.listKeySpend(today()))).toEqual({
          [a.id]: { cost: 0.875, tokens: 42 },
          [b.id]: { cost: 2, tokens: 0 },
          [idle.id]: { cost: 0, tokens: 0 },
        });
        expect((await store.listKeySpend('2000-01-01')).get(a.id)).toEqual({
          cost: 0.875,
          tokens: 0,
        });

        // A deleted session's cost leaves its key's sum; the day's tokens stay charged.
        expect(await store.deleteSession(a2.id)).toBe(true);
        expect(await store.keySpend(a.id, today())).toEqual({ cost: 0.25, tokens: 42 });
        expect((await store.listKeySpend(today())).get(a.id)).toEqual({ cost: 0.25, tokens: 42 });
      });

      it('records the owner key and end user of a session; the admin owns by default', async () => {
        const owned = await newSession({ owner: { key: 'key_a', user: 'alice' } });
        const admins = await newSession();
        expect(owned).toMatchObject({ owner_key: 'key_a', end_user: 'alice' });
        expect(admins).toMatchObject({ owner_key: null, end_user: null });
        expect(await store.findSession(owned.id)).toMatchObject({ owner_key: 'key_a' });
      });

      it('lists the sessions of one key, and of one end user', async () => {
        const a1 = await newSession({ owner: { key: 'key_a', user: 'alice' } });
        await tick();
        const a2 = await newSession({ owner: { key: 'key_a', user: 'bob' } });
        await newSession({ owner: { key: 'key_b', user: 'alice' } });
        await newSession();
        const ofA = await store.listSessions({ ownerKey: 'key_a', limit: 10 });
        expect(ofA.items.map((s) => s.id)).toEqual([a2.id, a1.id]);
        const aliceOfA = await store.listSessions({
          ownerKey: 'key_a',
          endUser: 'alice',
          limit: 10,
        });
        expect(aliceOfA.items.map((s) => s.id)).toEqual([a1.id]);
        expect((await store.listSessions({ limit: 10 })).items).toHaveLength(4);
      });

      it('matches a transcript only within the same key and end user', async () => {
        const alice = await newSession({ owner: { key: 'key_a', user: 'alice' } });
        const bob = await newSession({ owner: { key: 'key_a', user: 'bob' } });
        const admins = await newSession();
        for (const session of [alice, bob, admins])
          await store.appendMessages(session.id, conversation(2));
        const hash = transcriptHash(conversation(2))!;
        const find = (key: string | null, user: string | null) =>
          store.findSessionByTranscript('assistant', hash, { key, user });
        expect((await find('key_a', 'alice'))?.id).toBe(alice.id);
        expect((await find('key_a', 'bob'))?.id).toBe(bob.id);
        expect((await find(null, null))?.id).toBe(admins.id);
        expect(await find('key_a', null)).toBeUndefined();
        expect(await find('key_b', 'alice')).toBeUndefined();
      });

      it('starts the transcript chain from the seed it is given', async () => {
        const seeded = await newSession({ transcriptSeed: 'seed-1' });
        expect(seeded.transcript_hash).toBe('seed-1');
        await store.appendMessages(seeded.id, conversation(2));
        const chained = conversation(2).reduce<string>(
          (previous, message) => nextTranscriptHash(previous, message),
          'seed-1',
        );
        expect((await store.findSession(seeded.id))?.transcript_hash).toBe(chained);
        // The same words without the seed are another transcript.
        expect(
          await store.findSessionByTranscript(
            'assistant',
            transcriptHash(conversation(2))!,
            ADMIN_OWNER,
          ),
        ).toBeUndefined();
      });

      it('gives a task its session owner, lists tasks of one key, and stores who decided', async () => {
        const owned = await newSession({ owner: { key: 'key_a', user: 'alice' } });
        const admins = await newSession();
        const task = await store.createTask({
          sessionId: owned.id,
          agentName: 'assistant',
          input: 'x',
        });
        await store.createTask({ sessionId: admins.id, agentName: 'assistant', input: 'y' });
        expect(task).toMatchObject({ owner_key: 'key_a', end_user: 'alice', decided_by: null });
        const ofA = await store.listTasks({ ownerKey: 'key_a', limit: 10 });
        expect(ofA.items.map((t) => t.id)).toEqual([task.id]);
        const decided = await store.transitionTask(task.id, ['running'], {
          decided_by: JSON.stringify({ key: 'key_a', user: 'alice' }),
        });
        expect(JSON.parse(decided?.decided_by ?? 'null')).toEqual({ key: 'key_a', user: 'alice' });
        await expectCairnError(
          store.createTask({ sessionId: 'sess_missing', agentName: 'assistant', input: 'z' }),
          'SESSION_NOT_FOUND',
        );
      });

      it('lists the events of one key only', async () => {
        const owned = await newSession({ owner: { key: 'key_a', user: null } });
        const other = await newSession({ owner: { key: 'key_b', user: null } });
        const mine = await store.appendEvent({ type: 't', sessionId: owned.id, data: {} });
        await store.appendEvent({ type: 't', sessionId: other.id, data: {} });
        await store.appendEvent({ type: 't', sessionId: null, data: {} });
        const listed = await store.listEvents({ afterId: 0, ownerKey: 'key_a', limit: 10 });
        expect(listed.map((e) => e.id)).toEqual([mine.id]);
        expect(
          await store.listEvents({ afterId: 0, sessionId: other.id, ownerKey: 'key_a', limit: 10 }),
        ).toEqual([]);
        expect(
          (
            await store.listEvents({
              afterId: 0,
              sessionId: owned.id,
              ownerKey: 'key_a',
              limit: 10,
            })
          ).length,
        ).toBe(1);
      });

      it('gives an imported session to the importer', async () => {
        const original = await newSession();
        const id = await store.createImportedSession(
          { ...original, end_user: 'from-file' },
          { key: 'key_a', user: null },
        );
        expect(await store.findSession(id)).toMatchObject({
          owner_key: 'key_a',
          end_user: 'from-file',
        });
        const named = await store.createImportedSession(original, { key: 'key_a', user: 'carol' });
        expect((await store.findSession(named))?.end_user).toBe('carol');
      });
    });

    describe('close', () => {
      it('resolves, and closing twice is harmless', async () => {
        await newSession();
        await store.close();
        await store.close();
      });
    });
  });
}
