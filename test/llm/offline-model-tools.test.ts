/**
 * The offline model's tool calls: it calls a tool only when the newest user
 * message says so (`/tool`, `/ask`, "use the … tool", "ask me …"), only a
 * tool the request offers, one step per reply, and answers with the results
 * once every step is done; the same request always gives the same reply, and
 * what it produces passes the outgoing normaliser unchanged.
 */
import { describe, expect, it } from 'vitest';
import type { ChatMessage, ToolSpec } from '../../src/llm/messages.js';
import type { ModelRequest } from '../../src/llm/model-client.js';
import { normalizeOutgoing } from '../../src/llm/normalize-request.js';
import {
  OFFLINE_DIRECTIVES_HINT,
  OFFLINE_LABEL,
  OFFLINE_TOOL_NOTE,
  OfflineModel,
} from '../../src/llm/offline-model.js';
import { offlineSteps } from '../../src/llm/offline-tools.js';

const CURRENT_TIME: ToolSpec = {
  name: 'current_time',
  description: 'The time.',
  parameters: { type: 'object', properties: {}, additionalProperties: false },
};
const ASK_USER: ToolSpec = {
  name: 'ask_user',
  description: 'Ask.',
  parameters: {
    type: 'object',
    properties: { question: { type: 'string' } },
    required: ['question'],
  },
};
const BOOK_HOTEL: ToolSpec = {
  name: 'book_hotel',
  description: 'Books.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' }, nights: { type: 'integer' } },
    required: ['city'],
  },
};
const TOOLS = [CURRENT_TIME, ASK_USER, BOOK_HOTEL];

const model = new OfflineModel();

/** `tools: null` sends no tools at all. */
function request(messages: ChatMessage[], tools: ToolSpec[] | null = TOOLS): ModelRequest {
  return {
    messages: [{ role: 'system', content: 'You plan trips.' }, ...messages],
    ...(tools ? { tools } : {}),
    purpose: 'chat',
  };
}

const user = (content: string): ChatMessage => ({ role: 'user', content });

async function reply(messages: ChatMessage[], tools: ToolSpec[] | null = TOOLS) {
  return model.complete(request(messages, tools));
}

/** The steps' calls as [name, arguments] pairs. */
function calls(message: string, tools: ToolSpec[] = TOOLS): unknown[] {
  return offlineSteps(message, tools).map((s) =>
    s.kind === 'call' ? [s.name, s.arguments] : ['problem', s.name],
  );
}

describe('offline model directives', () => {
  it('reads /tool lines with JSON, key=value, plain text or no arguments', () => {
    expect(calls('/tool current_time')).toEqual([['current_time', {}]]);
    expect(calls('/tool book_hotel {"city":"Lyon","nights":2}')).toEqual([
      ['book_hotel', { city: 'Lyon', nights: 2 }],
    ]);
    expect(calls('/tool book_hotel city=Lyon nights=2')).toEqual([
      ['book_hotel', { city: 'Lyon', nights: 2 }],
    ]);
    expect(calls('/tool book_hotel city="New York"')).toEqual([
      ['book_hotel', { city: 'New York' }],
    ]);
    expect(calls('/tool book_hotel Le Puy-en-Velay')).toEqual([
      ['book_hotel', { city: 'Le Puy-en-Velay' }],
    ]);
    expect(calls('/tool book_hotel {"city":')).toEqual([['problem', 'book_hotel']]);
    expect(calls('/tool current_time now please')).toEqual([['problem', 'current_time']]);
  });

  it('reads /ask lines and the words "ask me" and "use the … tool"', () => {
    expect(calls('/ask Which city should the trip start from?')).toEqual([
      ['ask_user', { question: 'Which city should the trip start from?' }],
    ]);
    expect(calls('Plan a three-day trip and ask me which city to start from.')).toEqual([
      ['ask_user', { question: 'Which city to start from?' }],
    ]);
    expect(calls('Plan a trip. Ask me: Where do we start? Then go.')).toEqual([
      ['ask_user', { question: 'Where do we start?' }],
    ]);
    expect(calls('What time is it? Use the current_time tool.')).toEqual([['current_time', {}]]);
    expect(calls('Please use `book_hotel` tool: Annecy')).toEqual([
      ['book_hotel', { city: 'Annecy' }],
    ]);
    expect(
      calls('Book hotels. Use the book_hotel tool: Lyon. Use the book_hotel tool: St. Malo.'),
    ).toEqual([
      ['book_hotel', { city: 'Lyon' }],
      ['book_hotel', { city: 'St' }],
    ]);
    expect(calls('Use the book_hotel tool: city=Lyon; then rest.')).toEqual([
      ['book_hotel', { city: 'Lyon' }],
    ]);
    expect(calls('Use the ask_user tool: Which city?')).toEqual([
      ['ask_user', { question: 'Which city?' }],
    ]);
  });

  it('keeps the order of the message, one step per directive', () => {
    expect(
      calls('Book hotels.\n/tool book_hotel city=Lyon\n/tool book_hotel city=Annecy\n/ask Done?'),
    ).toEqual([
      ['book_hotel', { city: 'Lyon' }],
      ['book_hotel', { city: 'Annecy' }],
      ['ask_user', { question: 'Done?' }],
    ]);
    expect(calls('Ask me where to go, then use the current_time tool')).toEqual([
      ['ask_user', { question: 'Where to go, then use the current_time tool?' }],
      ['current_time', {}],
    ]);
  });

  it('finds nothing in a message without a directive', () => {
    expect(calls('Plan a three-day trip')).toEqual([]);
    expect(calls('What tools do you use? /tool is a word here')).toEqual([]);
  });
});

describe('OfflineModel with tools', () => {
  it('answers a message without a directive with the canned reply, which says how to get a call', async () => {
    const response = await reply([user('Plan a three-day trip')]);
    expect(response.message.tool_calls).toBeUndefined();
    expect(response.finishReason).toBe('stop');
    expect(response.message.content).toContain(
      `${OFFLINE_LABEL} You said: "Plan a three-day trip"`,
    );
    expect(response.message.content).toContain(OFFLINE_DIRECTIVES_HINT);
  });

  it('calls an offered tool with a proper id and JSON arguments, labelled offline', async () => {
    const response = await reply([user('/tool book_hotel city=Lyon')]);
    expect(response.finishReason).toBe('tool_calls');
    expect(response.message.content).toBe(
      `${OFFLINE_LABEL} Calling the tool book_hotel, as your message asked.`,
    );
    const [call, ...rest] = response.message.tool_calls!;
    expect(rest).toEqual([]);
    expect(call!.type).toBe('function');
    expect(call!.id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(call!.function).toEqual({ name: 'book_hotel', arguments: '{"city":"Lyon"}' });
    expect(response.usage!.completion_tokens).toBeGreaterThan(0);
  });

  it('is deterministic: the same request gives the same call and id; another request another id', async () => {
    const first = await reply([user('/tool current_time')]);
    const again = await reply([user('/tool current_time')]);
    expect(again).toEqual(first);
    const other = await reply([user('hi'), user('/tool current_time')]);
    expect(other.message.tool_calls![0]!.id).not.toBe(first.message.tool_calls![0]!.id);
  });

  it('replies with the result once the call has it, then takes the next step', async () => {
    const first = await reply([user('/tool book_hotel city=Lyon\n/tool book_hotel city=Annecy')]);
    const call = first.message.tool_calls![0]!;
    const afterFirst: ChatMessage[] = [
      user('/tool book_hotel city=Lyon\n/tool book_hotel city=Annecy'),
      first.message,
      { role: 'tool', tool_call_id: call.id, name: 'book_hotel', content: 'Booked Lyon.' },
    ];
    const second = await reply(afterFirst);
    const next = second.message.tool_calls![0]!;
    expect(next.function).toEqual({ name: 'book_hotel', arguments: '{"city":"Annecy"}' });
    expect(next.id).not.toBe(call.id);
    const done = await reply([
      ...afterFirst,
      second.message,
      { role: 'tool', tool_call_id: next.id, name: 'book_hotel', content: 'A person denied it.' },
    ]);
    expect(done.message.tool_calls).toBeUndefined();
    expect(done.finishReason).toBe('stop');
    expect(done.message.content).toBe(
      `${OFFLINE_LABEL} I called book_hotel {"city":"Lyon"}; it returned: Booked Lyon. ` +
        `I called book_hotel {"city":"Annecy"}; it returned: A person denied it. ${OFFLINE_TOOL_NOTE}`,
    );
  });

  it('asks with ask_user and repeats the answer it gets', async () => {
    const asked = await reply([user('Plan a three-day trip. Ask me which city to start from.')]);
    const call = asked.message.tool_calls![0]!;
    expect(call.function).toEqual({
      name: 'ask_user',
      arguments: JSON.stringify({ question: 'Which city to start from?' }),
    });
    const answered = await reply([
      user('Plan a three-day trip. Ask me which city to start from.'),
      asked.message,
      { role: 'tool', tool_call_id: call.id, name: 'ask_user', content: 'Lyon' },
    ]);
    expect(answered.message.content).toContain('it returned: Lyon.');
  });

  it('never calls a tool the request does not offer, and names the one it would need', async () => {
    for (const tools of [null, [CURRENT_TIME]]) {
      const response = await reply([user('/tool book_hotel city=Lyon')], tools);
      expect(response.message.tool_calls).toBeUndefined();
      expect(response.message.content).toContain(
        `I would need the tool "book_hotel", which this request does not offer (tools offered: ${tools ? 'current_time' : 'none'}).`,
      );
      expect(response.message.content!.startsWith(OFFLINE_LABEL)).toBe(true);
    }
    const ask = await reply([user('Ask me where to go.')], [CURRENT_TIME]);
    expect(ask.message.tool_calls).toBeUndefined();
    expect(ask.message.content).toContain('I would need the tool "ask_user"');
  });

  it('stops at a step it cannot take, after reporting the ones it took', async () => {
    const message = user('/tool current_time\n/tool send_money amount=5');
    const first = await reply([message]);
    const call = first.message.tool_calls![0]!;
    const done = await reply([
      message,
      first.message,
      { role: 'tool', tool_call_id: call.id, name: 'current_time', content: '{"iso":"x"}' },
    ]);
    expect(done.message.content).toContain('I called current_time {}; it returned: {"iso":"x"}.');
    expect(done.message.content).toContain('I would need the tool "send_money"');
  });

  it('streams the text of a call and of its answer as deltas', async () => {
    const deltas: string[] = [];
    const response = await model.complete(request([user('/tool current_time')]), {
      onDelta: (text) => deltas.push(text),
    });
    expect(deltas.join('')).toBe(response.message.content);
  });

  it('produces messages the outgoing normaliser leaves as they are', async () => {
    const message = user('/tool book_hotel {"city":"Lyon"}');
    const first = await reply([message]);
    const call = first.message.tool_calls![0]!;
    const history: ChatMessage[] = [
      { role: 'system', content: 'You plan trips.' },
      message,
      first.message,
      { role: 'tool', tool_call_id: call.id, name: 'book_hotel', content: 'Booked.' },
    ];
    expect(normalizeOutgoing(history)).toEqual(history);
  });
});
