/**
 * The shape of a loaded agent (agents/<name>/agent.json after validation,
 * defaults and systemFile resolution) and of a problem found while loading one.
 */

/** Agent names: also folder names and URL segments, so no dots, slashes or upper case. */
export const AGENT_NAME_PATTERN = /^[a-z0-9][a-z0-9_-]{0,63}$/;

export const DEFAULT_COMPACT_COUNT = 50;
export const DEFAULT_MAX_SUMMARY_CHARS = 12_000;
/** Percent of the main model's context window at which an agent that sets none compacts automatically. */
export const DEFAULT_AUTO_THRESHOLD = 80;
/** Percent of the window from which the next summary is prepared off the turn, when it is below autoThreshold. */
export const DEFAULT_PREPARE_AT = 60;

/**
 * The agent's `prepareAt` as it applies: as given, else 60 when that is
 * below `autoThreshold`, else 0 (no preparation: a threshold that low leaves
 * no room between the two).
 */
export function prepareAtOf(given: number | undefined, autoThreshold: number): number {
  if (autoThreshold <= 0) return 0;
  if (given !== undefined) return given;
  return DEFAULT_PREPARE_AT < autoThreshold ? DEFAULT_PREPARE_AT : 0;
}
export const DEFAULT_MAX_ITERATIONS = 10;
/** Automatic recall of compacted messages, on for every agent unless turned off. */
export const DEFAULT_RECALL: AgentConfig['defaultCompaction']['recall'] = {
  enabled: true,
  maxMessages: 6,
  maxTokens: 1_200,
  minScore: 0.5,
  minRelativeScore: 0.4,
};
export const DEFAULT_MEMORY_MAX_CHARS = 4_000;

/** agent.json's `defaultCompaction.pruneToolResults` when it is on. */
export interface PruneToolResults {
  /** The newest tool results always sent whole. */
  readonly keepLast: number;
  /** Results of at most this many tokens are always sent whole. */
  readonly minTokens: number;
}

/** Old tool results are cleared for an agent that does not set pruneToolResults. */
export const DEFAULT_PRUNE_TOOL_RESULTS: PruneToolResults = Object.freeze({
  keepLast: 3,
  minTokens: 400,
});

export interface AgentConfig {
  readonly name: string;
  readonly description: string;
  readonly model?: string;
  /** Resolved: the inline text or the contents of `systemFile`. */
  readonly system: string;
  /** Tool specs as listed (the `tool` of an object entry): built-in, `agent:<name>` or `./module.js`. */
  readonly tools: readonly string[];
  /** The specs of `tools` whose calls need a person's approval (`"approval": "required"`). */
  readonly toolsNeedingApproval: readonly string[];
  /** Of those, the ones with an `approvalTimeout`: spec → the duration as written ("30m"). */
  readonly approvalTimeouts?: Readonly<Record<string, string>>;
  readonly maxIterations: number;
  /** Budgets (`limits` in agent.json); absent, or an absent field, is no limit. */
  readonly limits?: AgentLimits;
  readonly temperature?: number;
  /** Title an untitled chat session from its first exchange (compact role, in the background). */
  readonly autoTitle: boolean;
  readonly memory: {
    readonly enabled: boolean;
    readonly maxChars: number;
    /** False: the model may search notes but not save or delete them. */
    readonly write: boolean;
  };
  readonly defaultCompaction: {
    /** Percent of the uncompacted history each compaction folds (agent.json's `compactCount`). */
    readonly compactCount: number;
    /** Percent (1–100) of the main model's context window that triggers a compaction; 0 = off. */
    readonly autoThreshold: number;
    /**
     * Percent of the main model's context window from which the next summary
     * is prepared off the turn, landing at the next turn's start; 0 = off.
     * Always below `autoThreshold`.
     */
    readonly prepareAt: number;
    readonly maxSummaryChars: number;
    /** Fixed sections edited in place by each compaction, or free prose. */
    readonly summaryFormat: 'sections' | 'prose';
    /** Old tool results sent as one-line placeholders (the stored messages stay whole); false = off. */
    readonly pruneToolResults: PruneToolResults | false;
    /** Before each model call, search the compacted raw messages and put the best matches back. */
    readonly recall: {
      readonly enabled: boolean;
      readonly maxMessages: number;
      readonly maxTokens: number;
      /** 0–1: the share of the query's terms (up to four) a message must contain. */
      readonly minScore: number;
      /**
       * 0–1: a message is recalled only when its rank score is at least this
       * share of the best match's, so weak matches do not fill the block.
       */
      readonly minRelativeScore: number;
      /**
       * `hybrid`: lexical and vector candidates fused (needs the `embed` model
       * role); `lexical`: the full-text search alone. Absent: hybrid when an
       * `embed` role is configured, lexical otherwise.
       */
      readonly mode?: 'hybrid' | 'lexical';
    };
  };
  readonly daemon?: { readonly every?: string; readonly cron?: string; readonly prompt: string };
  /** Absolute path of the agent folder. */
  readonly dir: string;
}

export interface AgentLimits {
  readonly maxTurnTokens?: number;
  readonly maxSessionTokens?: number;
  readonly maxToolCalls?: number;
}

export interface AgentProblem {
  /** Path of the agent.json the problem is in. */
  file: string;
  /** JSON pointer into that file, e.g. `/defaultCompaction/compactCount`; '' for the root. */
  pointer: string;
  /** The ajv keyword that failed, or 'name-mismatch' | 'json-parse' | 'path-escape' | 'system-file' | 'duplicate-tool' | 'tool'. */
  rule: string;
  message: string;
  /** Where in the file (1-based): the value the pointer names, an unknown property's name, or where a syntax error stops the parser. Absent when the file could not be read. */
  line?: number;
  column?: number;
}

/** Where one entry of a `tools` list is in its file. */
export interface ToolEntryPlace {
  pointer: string;
  line: number;
  column: number;
}

/**
 * One agent file's tool list, as the tool check reads it: the loaded agent,
 * or for a file that was rejected, a stand-in holding the entries that could
 * still be read, so one report names the file's tool problems beside its
 * other ones.
 */
export interface AgentToolList {
  /** Path of the agent.json. */
  readonly file: string;
  readonly agent: AgentConfig;
  /** Where each of `agent.tools` is in the file, in the same order. */
  readonly entries: readonly ToolEntryPlace[];
  /** Where the `tools` list itself is (the file's start when it has none). */
  readonly list: ToolEntryPlace;
}
