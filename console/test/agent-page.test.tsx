/**
 * The agent page: an unknown agent's page says so and offers nothing to do;
 * a known agent with memory off says what that means for its notes.
 */
import { renderToString } from 'preact-render-to-string';
import { describe, expect, it } from 'vitest';
import { Api } from '../src/lib/api';
import { ApiContext, RoleContext } from '../src/lib/hooks';
import type { Agent } from '../src/lib/types';
import { AgentPage } from '../src/views/AgentsView';

const AGENT: Agent = {
  name: 'assistant',
  description: 'Helps',
  tools: ['current_time'],
  memory: { enabled: false, maxChars: 4000, write: true },
  resolvedModel: { provider: 'openai', model: 'test-model', contextWindow: 4096 },
};

const api = new Api({
  onUnauthorized: () => undefined,
  storage: { getItem: () => null, setItem: () => undefined, removeItem: () => undefined },
});
const render = (agents: Agent[] | undefined, name: string, role: 'admin' | 'client' = 'admin') =>
  renderToString(
    <ApiContext.Provider value={api}>
      <RoleContext.Provider value={role}>
        <AgentPage agents={agents} name={name} />
      </RoleContext.Provider>
    </ApiContext.Provider>,
  );

describe('<AgentPage>', () => {
  it('says an unknown agent does not exist, with no chat, sessions or memory to act on', () => {
    const html = render([AGENT], 'nobody');
    expect(html).toContain('No agent named “nobody”');
    expect(html).not.toContain('New chat');
    expect(html).not.toContain('Sessions of');
    expect(html).not.toContain('Memory notes');
    expect(html).not.toContain('Add note');
    expect(html).toContain('href="/console/agents"');
  });

  it('waits for the list before deciding, with no buttons meanwhile', () => {
    const html = render(undefined, 'assistant');
    expect(html).toContain('Loading…');
    expect(html).not.toContain('New chat');
  });

  it('offers a known agent’s chat and memory', () => {
    const html = render([AGENT], 'assistant');
    expect(html).toContain('New chat');
    expect(html).toContain('Memory notes');
  });

  it('says, beside the notes of an agent with memory off, that the model is not given them', () => {
    const off = render([AGENT], 'assistant');
    expect(off).toContain('Memory is off for this agent');
    const on = render([{ ...AGENT, memory: { enabled: true, maxChars: 4000 } }], 'assistant');
    expect(on).not.toContain('Memory is off');
  });
});
