/**
 * The pure parts of the MCP client: `mcpServers` settings
 * (strict schema, `${VAR}` expansion, missing variables), model-facing tool
 * names, schema adaptation for providers, and result formatting.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { CairnError } from '../../src/errors.js';
import { formatMcpResult, MCP_RESULT_MAX_CHARS } from '../../src/mcp/format-result.js';
import { adaptInputSchema } from '../../src/mcp/schema-adapter.js';
import { modelToolName } from '../../src/mcp/tool-names.js';
import { parseMcpToolSpec } from '../../src/tools/mcp-tool-spec.js';

const homes: string[] = [];
afterEach(() => {
  for (const dir of homes.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function settingsWith(mcpServers: unknown, env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'cairn-mcp-settings-'));
  homes.push(dir);
  writeFileSync(join(dir, 'cairn.json'), JSON.stringify({ mcpServers }));
  return loadSettings({ home: dir, env });
}

function settingsError(mcpServers: unknown): string {
  try {
    settingsWith(mcpServers);
  } catch (err) {
    expect(err).toBeInstanceOf(CairnError);
    expect((err as CairnError).code).toBe('VALIDATION_ERROR');
    return (err as CairnError).message;
  }
  throw new Error('expected the settings to be rejected');
}

describe('mcpServers settings', () => {
  it('resolves stdio and HTTP servers with ${VAR} from the environment', () => {
    const settings = settingsWith(
      {
        files: {
          command: 'node',
          args: ['server.js'],
          env: { TOKEN: 'x-${FILES_TOKEN}' },
          cwd: 'srv',
        },
        remote: {
          url: 'https://mcp.example.com/mcp',
          headers: { Authorization: 'Bearer ${REMOTE}' },
          timeoutMs: 5000,
        },
      },
      { FILES_TOKEN: 'files-secret', REMOTE: 'remote-secret' },
    );
    const files = settings.mcpServers['files']!;
    expect(files).toMatchObject({
      transport: 'stdio',
      command: 'node',
      args: ['server.js'],
      env: { TOKEN: 'x-files-secret' },
      missingEnv: [],
    });
    expect(files.transport === 'stdio' && files.cwd).toBe(join(settings.home, 'srv'));
    expect(files.secrets).toEqual(['files-secret']);
    expect(settings.mcpServers['remote']).toMatchObject({
      transport: 'http',
      headers: { Authorization: 'Bearer remote-secret' },
      timeoutMs: 5000,
    });
    expect(Object.isFrozen(settings.mcpServers['remote'])).toBe(true);
  });

  it('records a missing variable on the server instead of failing', () => {
    const settings = settingsWith({ remote: { url: 'http://x/mcp', headers: { A: '${NOPE}' } } });
    expect(settings.mcpServers['remote']!.missingEnv).toEqual(['NOPE']);
  });

  it('is empty without mcpServers', () => {
    expect(settingsWith(undefined).mcpServers).toEqual({});
  });

  it('rejects unknown keys, both or neither of command and url, and bad names', () => {
    expect(settingsError({ a: { command: 'x', colour: 'red' } })).toContain('/mcpServers/a');
    expect(settingsError({ a: { command: 'x', url: 'http://x' } })).toContain('/mcpServers/a');
    expect(settingsError({ a: { args: ['x'] } })).toContain('/mcpServers/a');
    expect(settingsError({ a: { url: 'ftp://x' } })).toContain('/mcpServers/a');
    expect(settingsError({ 'bad name': { command: 'x' } })).toContain('/mcpServers');
    expect(settingsError({ a: { command: 'x', env: { N: 1 } } })).toContain('/mcpServers/a');
  });
});

describe('tool specs and names', () => {
  it('parses mcp: entries', () => {
    expect(parseMcpToolSpec('mcp:files')).toEqual({ server: 'files' });
    expect(parseMcpToolSpec('mcp:files/read_text_file')).toEqual({
      server: 'files',
      tool: 'read_text_file',
    });
    expect(parseMcpToolSpec('agent:files')).toBeUndefined();
  });

  it('joins server and tool with __, replaces other characters, cuts long names with a hash', () => {
    expect(modelToolName('files', 'read_text_file')).toBe('files__read_text_file');
    expect(modelToolName('gh', 'issues.list/all')).toBe('gh__issues_list_all');
    const a = modelToolName('server', 'x'.repeat(80) + 'a');
    const b = modelToolName('server', 'x'.repeat(80) + 'b');
    expect(a).toHaveLength(64);
    expect(a).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
    expect(a).not.toBe(b);
    expect(modelToolName('server', 'x'.repeat(80) + 'a')).toBe(a);
  });
});

describe('adaptInputSchema', () => {
  it('keeps an ordinary object schema as it is', () => {
    const schema = { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] };
    expect(adaptInputSchema(schema)).toEqual(schema);
  });

  it('adds type and properties, drops $schema at every level', () => {
    expect(
      adaptInputSchema({ $schema: 'x', properties: { a: { $schema: 'y', type: 'string' } } }),
    ).toEqual({
      type: 'object',
      properties: { a: { type: 'string' } },
    });
    expect(adaptInputSchema(undefined)).toEqual({ type: 'object', properties: {} });
  });

  it('keeps a property named $schema', () => {
    expect(
      adaptInputSchema({ type: 'object', properties: { $schema: { type: 'string' } } }),
    ).toEqual({
      type: 'object',
      properties: { $schema: { type: 'string' } },
    });
  });

  it('folds top-level combinators into the description, merging their properties', () => {
    const adapted = adaptInputSchema({
      type: 'object',
      description: 'Find a thing.',
      oneOf: [
        { properties: { id: { type: 'integer' } }, required: ['id'] },
        { properties: { name: { type: 'string' } }, required: ['name'] },
      ],
    });
    expect(adapted).not.toHaveProperty('oneOf');
    expect(adapted['properties']).toEqual({ id: { type: 'integer' }, name: { type: 'string' } });
    expect(adapted['description']).toMatch(
      /^Find a thing\. The arguments must also satisfy oneOf: /,
    );
  });
});

describe('formatMcpResult', () => {
  it('joins text, summarises media and links', () => {
    const text = formatMcpResult({
      content: [
        { type: 'text', text: 'first' },
        { type: 'image', data: 'AAAA', mimeType: 'image/png' },
        { type: 'audio', data: 'AAA=', mimeType: 'audio/wav' },
        { type: 'resource_link', uri: 'file:///a.txt', name: 'a.txt' },
        { type: 'resource', resource: { uri: 'file:///b.txt', text: 'inside b' } },
        {
          type: 'resource',
          resource: { uri: 'file:///c.bin', mimeType: 'application/zip', blob: 'AAAAAAAA' },
        },
        { type: 'text', text: 'last' },
      ],
    });
    expect(text.split('\n')).toEqual([
      'first',
      '[image image/png, 3 bytes, not shown]',
      '[audio audio/wav, 2 bytes, not shown]',
      '[resource link file:///a.txt (a.txt)]',
      '[resource file:///b.txt]',
      'inside b',
      '[resource file:///c.bin, application/zip, 6 bytes, not shown]',
      'last',
    ]);
  });

  it('adds structured content as JSON unless the text already holds it', () => {
    expect(formatMcpResult({ content: [], structuredContent: { n: 1 } })).toBe('{"n":1}');
    expect(
      formatMcpResult({
        content: [{ type: 'text', text: '{ "n": 1 }' }],
        structuredContent: { n: 1 },
      }),
    ).toBe('{ "n": 1 }');
    expect(
      formatMcpResult({ content: [{ type: 'text', text: 'note' }], structuredContent: { n: 2 } }),
    ).toBe('note\n{"n":2}');
  });

  it('clips a long result in the middle', () => {
    const long = 'a'.repeat(MCP_RESULT_MAX_CHARS) + 'END';
    const text = formatMcpResult({ content: [{ type: 'text', text: 'START' + long }] });
    expect(text.length).toBeLessThanOrEqual(MCP_RESULT_MAX_CHARS);
    expect(text.startsWith('START')).toBe(true);
    expect(text.endsWith('END')).toBe(true);
    expect(text).toMatch(/characters omitted/);
  });
});
