/**
 * The stdio transport of `cairn mcp`: one JSON-RPC message per line on stdin,
 * one per line on stdout. Unlike the SDK's stdio transport, which drops a
 * line it cannot read, every bad line gets a JSON-RPC error reply, so a
 * client (or a person typing) learns what went wrong: `-32700` for a line
 * that is not JSON, `-32600` for JSON that is not one JSON-RPC message
 * (a batch included: MCP sends one message per line and has no batches).
 */
import type { Readable, Writable } from 'node:stream';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

export const PARSE_ERROR = -32700;
export const INVALID_REQUEST = -32600;

/** The longest line read (as the SDK's transport): past it the line is answered and skipped. */
const MAX_LINE_BYTES = 10 * 1024 * 1024;

/** A JSON-RPC error reply to a line that could not be handled (`id` null when it has none). */
export interface LineError {
  jsonrpc: '2.0';
  id: string | number | null;
  error: { code: number; message: string };
}

function lineError(code: number, message: string, id: string | number | null = null): LineError {
  return { jsonrpc: '2.0', id, error: { code, message } };
}

/** What one line of stdin is: a message, the error that answers it, or nothing (a blank line). Pure. */
export function readLine(line: string): { message: JSONRPCMessage } | { error: LineError } | null {
  if (line.trim() === '') return null;
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return {
      error: lineError(
        PARSE_ERROR,
        'Parse error: the line is not JSON. Send one JSON-RPC 2.0 message per line.',
      ),
    };
  }
  if (Array.isArray(value))
    return {
      error: lineError(
        INVALID_REQUEST,
        'Invalid Request: batches are not supported; send one JSON-RPC message per line.',
      ),
    };
  const parsed = JSONRPCMessageSchema.safeParse(value);
  if (parsed.success) return { message: parsed.data };
  const id = typeof value === 'object' && value !== null && 'id' in value ? value.id : null;
  return {
    error: lineError(
      INVALID_REQUEST,
      'Invalid Request: not a JSON-RPC 2.0 request, notification or response (it needs "jsonrpc": "2.0" and a string "method", or an "id" with a "result" or an "error").',
      typeof id === 'string' || typeof id === 'number' ? id : null,
    ),
  };
}

export class StdioLineTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private buffer = Buffer.alloc(0);
  /** Skipping the rest of a line that was too long, up to its newline. */
  private skipping = false;
  private closed = false;

  constructor(
    private readonly input: Readable = process.stdin,
    private readonly output: Writable = process.stdout,
  ) {}

  private readonly onData = (chunk: Buffer): void => {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      const end = this.buffer.indexOf(0x0a);
      if (end === -1) break;
      const line = this.buffer.toString('utf8', 0, end).replace(/\r$/, '');
      this.buffer = this.buffer.subarray(end + 1);
      if (this.skipping) {
        this.skipping = false;
        continue;
      }
      this.handle(line);
    }
    if (this.buffer.length > MAX_LINE_BYTES) {
      this.buffer = Buffer.alloc(0);
      if (!this.skipping)
        void this.write(
          lineError(
            INVALID_REQUEST,
            `Invalid Request: a line longer than ${MAX_LINE_BYTES} bytes.`,
          ),
        );
      this.skipping = true;
    }
  };

  private readonly onError = (error: Error): void => this.onerror?.(error);

  private handle(line: string): void {
    const read = readLine(line);
    if (read === null) return;
    if ('error' in read) void this.write(read.error);
    else this.onmessage?.(read.message);
  }

  private write(value: unknown): Promise<void> {
    return new Promise((resolve) => {
      if (this.output.write(`${JSON.stringify(value)}\n`)) resolve();
      else this.output.once('drain', resolve);
    });
  }

  async start(): Promise<void> {
    this.input.on('data', this.onData);
    this.input.on('error', this.onError);
  }

  send(message: JSONRPCMessage): Promise<void> {
    return this.write(message);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.input.off('data', this.onData);
    this.input.off('error', this.onError);
    if (this.input.listenerCount('data') === 0) this.input.pause();
    this.buffer = Buffer.alloc(0);
    this.onclose?.();
  }
}
