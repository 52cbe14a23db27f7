/**
 * Session export as NDJSON: a `session` line, then one `message`
 * line per stored message in seq order, then one `compaction` line per row of
 * the compaction history, then one `vector` line per message embedding
 * (hybrid recall: the model and dimensions that made it, the float32s in
 * base64), so an import need not pay to embed the history again. Messages
 * and vectors are read page by page, so a session of any size streams in
 * bounded memory.
 */
import type { StoredMessage } from '../llm/messages.js';
import type {
  CompactionRow,
  CompactionStore,
  MessageLog,
  MessageVector,
  SessionRow,
  VectorStore,
} from '../store/store.js';
import { vectorBytes } from '../store/vector-bytes.js';

/** The `format` of the session line; an import refuses anything else. */
export const EXPORT_FORMAT = 'cairn.session';
export const EXPORT_VERSION = 1;
/** Messages read per page while exporting. */
const EXPORT_PAGE = 500;

export type ExportStore = Pick<MessageLog, 'listMessages'> &
  Pick<CompactionStore, 'listCompactions'> &
  Pick<VectorStore, 'listVectors'>;

/** A `vector` line's record: the float32s, little-endian, in base64. */
export interface ExportedVector {
  seq: number;
  model: string;
  dimensions: number;
  data: string;
}

/** The lines of the export of `session`, each ending in a newline. */
export async function* exportSessionLines(
  store: ExportStore,
  session: SessionRow,
): AsyncGenerator<string> {
  yield line({ type: 'session', format: EXPORT_FORMAT, version: EXPORT_VERSION, session });
  let afterSeq = 0;
  for (;;) {
    const page = await store.listMessages(session.id, { afterSeq, limit: EXPORT_PAGE });
    for (const message of page) yield line({ type: 'message', message: exported(message) });
    if (page.length < EXPORT_PAGE) break;
    afterSeq = page[page.length - 1]!.seq;
  }
  for (const compaction of await store.listCompactions(session.id)) {
    yield line({ type: 'compaction', compaction: withoutIds(compaction) });
  }
  let afterVectorSeq = 0;
  for (;;) {
    const page = await store.listVectors(session.id, afterVectorSeq, EXPORT_PAGE);
    for (const vector of page) yield line({ type: 'vector', vector: exportedVector(vector) });
    if (page.length < EXPORT_PAGE) break;
    afterVectorSeq = page[page.length - 1]!.seq;
  }
}

function exportedVector(vector: MessageVector): ExportedVector {
  return {
    seq: vector.seq,
    model: vector.model,
    dimensions: vector.dimensions,
    data: vectorBytes(vector.vector).toString('base64'),
  };
}

function line(value: unknown): string {
  return `${JSON.stringify(value)}\n`;
}

/** A message without its session id (an import gives it a new one). */
function exported(message: StoredMessage): Omit<StoredMessage, 'session_id'> {
  const { session_id: _sessionId, ...rest } = message;
  return rest;
}

function withoutIds(row: CompactionRow): Omit<CompactionRow, 'id' | 'session_id'> {
  const { id: _id, session_id: _sessionId, ...rest } = row;
  return rest;
}
