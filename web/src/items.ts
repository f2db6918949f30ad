// The transcript's render model: log entries folded into display items. Streaming text deltas
// grow one text item, a tool call and its result share one card, a permission request becomes a
// card its resolution updates, an input carries its receipts. Unknown kinds are shown, not
// dropped. Every item remembers the seq that created it and counts the entries folded into it.
// Where log compaction left the entries with a gap, a notice item says what is missing.

import { GapNotes } from "./compaction";
import { typed } from "./entries";
import type { CheckpointSummary } from "./protocol/CheckpointSummary";
import type { Compacted } from "./protocol/Compacted";
import type { Entry } from "./protocol/Entry";
import type { JsonValue } from "./protocol/serde_json/JsonValue";
import type { Todo } from "./protocol/Todo";

export type Receipt = "queued" | "delivered" | "applied" | "failed" | "uncertain";

interface Base {
  key: string;
  seq: number;
  ts: number;
  /** Bumped on every change, so the view knows what to redraw. */
  v: number;
}

export type Item = Base &
  (
    | { t: "line"; text: string; stream: string }
    | { t: "text"; messageId: string; text: string; final: boolean; thinking: boolean }
    | {
        t: "tool";
        id: string;
        name: string;
        input: Record<string, JsonValue>;
        path: string | null;
        status: "running" | "ok" | "error" | "interrupted";
        result: string | null;
      }
    | {
        t: "perm";
        requestId: string;
        toolName: string;
        input: Record<string, JsonValue>;
        path: string | null;
        description: string | null;
        decision: string | null;
        by: string | null;
      }
    | { t: "todos"; todos: Todo[] }
    | { t: "input"; kind: string; text: string; author: string; receipt: Receipt; reason: string | null; raw: string }
    | { t: "sys"; text: string; level: "info" | "warn" | "bad" | "ok" }
    | { t: "checkpoint"; payload: CheckpointSummary }
    | { t: "raw"; kind: string; payload: JsonValue }
    /** Compaction removed entries after seq `after` (its `seq`); `mark`: the newest the server named. */
    | { t: "compacted"; after: number; mark: Compacted }
  );

type P = Record<string, JsonValue>;

/** A tool input as an object (an agent-defined shape). */
const asObject = (v: JsonValue | undefined): P => (v && typeof v === "object" && !Array.isArray(v) ? (v as P) : {});
type Body = Item extends unknown ? (Item extends infer I ? (I extends Item ? Omit<I, keyof Base> : never) : never) : never;


/**
 * Kinds after which the agent that ran a tool or asked for a decision is gone, as the server's
 * fold settles them: a running tool will never return, an undecided request has expired.
 */
const SETTLING = new Set(["agent.start", "agent.exit", "agent.restart", "session.interrupted"]);

/** Keystrokes further apart than this start a new "typed …" item. */
export const KEYS_BURST_MS = 5000;
/** A burst item holds at most this many characters of keys. */
const KEYS_BURST_MAX = 4000;

const KEY_NAMES: Record<string, string> = {
  "\r": " ⏎",
  "\n": " ⏎",
  "\t": " ⇥",
  "\u001b": " Esc ",
  "\u007f": "⌫",
  "\u001b[A": " ↑ ",
  "\u001b[B": " ↓ ",
  "\u001b[C": " → ",
  "\u001b[D": " ← ",
};

/** Keys as a person reads them: `echo hello ⏎`, `^C`, arrows and Esc by name. */
export function keyText(raw: string): string {
  let out = "";
  for (let i = 0; i < raw.length; i++) {
    const three = raw.slice(i, i + 3);
    if (KEY_NAMES[three]) {
      out += KEY_NAMES[three];
      i += 2;
      continue;
    }
    const c = raw[i];
    const code = c.charCodeAt(0);
    if (KEY_NAMES[c]) out += KEY_NAMES[c];
    else if (code < 32) out += ` ^${String.fromCharCode(code + 64)} `;
    else out += c;
  }
  return out.replace(/ {2,}/g, " ").trim();
}

/** The oldest permission request still waiting for a decision, or null. */
export function pendingDecision(items: Item[]): (Item & { t: "perm" }) | null {
  for (const it of items) if (it.t === "perm" && it.decision === null) return it;
  return null;
}

export class ItemModel {
  items: Item[] = [];
  private texts = new Map<string, Item & { t: "text" }>();
  private tools = new Map<string, Item & { t: "tool" }>();
  private perms = new Map<string, Item & { t: "perm" }>();
  private inputs = new Map<number, Item & { t: "input" }>();
  /** Receipts that arrived for inputs not (yet) in the model, e.g. above a page boundary. */
  private orphanReceipts = new Map<number, [Receipt, string | null]>();
  /** Where compaction notices go, and the mark they show. */
  private gaps = new GapNotes(null, null);
  private notices: (Item & { t: "compacted" })[] = [];

  /**
   * Rebuilds from scratch (after older entries were prepended). `after`: the seq the entries
   * follow (0 at the log's start; null: unknown); `mark`: the compaction mark known.
   */
  rebuild(entries: Entry[], after: number | null = null, mark: Compacted | null = null): void {
    this.items = [];
    this.texts.clear();
    this.tools.clear();
    this.perms.clear();
    this.inputs.clear();
    this.orphanReceipts.clear();
    this.notices = [];
    this.gaps = new GapNotes(after, mark);
    this.apply(entries);
    this.noticeAtEnd();
  }

  /** Folds entries in; returns the items that changed (new ones are appended to `items`). */
  apply(entries: Entry[]): Set<Item> {
    const changed = new Set<Item>();
    for (const e of entries) {
      const gap = this.gaps.step(e);
      if (gap !== null) changed.add(this.notice(gap, e.ts));
      if (SETTLING.has(e.kind)) this.settle(changed);
      const it = this.one(e);
      if (it) {
        it.v += 1;
        changed.add(it);
      }
    }
    return changed;
  }

  /**
   * The server named a compaction mark (a reset at the cursor): the notices show it, and one
   * goes at the end if what follows the last entry may be gone. Returns the items that changed.
   */
  compact(mark: Compacted): Set<Item> {
    const changed = new Set<Item>();
    if (!this.gaps.note(mark)) return changed;
    for (const n of this.notices) {
      n.mark = this.gaps.mark as Compacted;
      n.v += 1;
      changed.add(n);
    }
    const end = this.noticeAtEnd();
    if (end) changed.add(end);
    return changed;
  }

  private noticeAtEnd(): Item | null {
    if (!this.gaps.tail()) return null;
    const last = this.items[this.items.length - 1];
    return this.notice(this.gaps.reached ?? 0, last?.ts ?? 0);
  }

  /** A notice that entries after seq `after` were compacted, appended to the items. */
  private notice(after: number, ts: number): Item & { t: "compacted" } {
    const item: Item & { t: "compacted" } = { key: `c${after}`, seq: after, ts, v: 1, t: "compacted", after, mark: this.gaps.mark as Compacted };
    this.items.push(item);
    this.notices.push(item);
    return item;
  }

  /** Marks running tools interrupted and undecided requests expired (see `SETTLING`). */
  private settle(changed: Set<Item>): void {
    for (const tool of this.tools.values()) {
      if (tool.status !== "running") continue;
      tool.status = "interrupted";
      tool.v += 1;
      changed.add(tool);
    }
    for (const perm of this.perms.values()) {
      if (perm.decision !== null) continue;
      perm.decision = "expired";
      perm.v += 1;
      changed.add(perm);
    }
  }

  private push(e: Entry, rest: Body): Item {
    const item = { key: `s${e.seq}`, seq: e.seq, ts: e.ts, v: 0, ...rest } as Item;
    this.items.push(item);
    return item;
  }

  private one(e: Entry): Item | null {
    const b = typed(e);
    if (!b) return this.untyped(e);
    switch (b.kind) {
      case "agent.output":
        return this.push(e, { t: "line", text: b.payload.text ?? "", stream: b.payload.stream ?? "stdout" });
      case "agent.text.delta": {
        const mid = b.payload.message_id ?? "?";
        const text = b.payload.text ?? "";
        const cur = this.texts.get(mid);
        if (cur && !cur.final) {
          cur.text += text;
          return cur;
        }
        const it = this.push(e, { t: "text", messageId: mid, text, final: false, thinking: false }) as Item & { t: "text" };
        this.texts.set(mid, it);
        return it;
      }
      case "agent.text": {
        const mid = b.payload.message_id ?? "?";
        const text = b.payload.text ?? "";
        const cur = this.texts.get(mid);
        if (cur && !cur.final) {
          cur.text = text;
          cur.final = true;
          return cur;
        }
        return this.push(e, { t: "text", messageId: mid, text, final: true, thinking: false });
      }
      case "agent.thinking":
        return this.push(e, { t: "text", messageId: b.payload.message_id ?? "?", text: b.payload.text ?? "", final: true, thinking: true });
      case "agent.tool_use": {
        const id = b.payload.id ?? `?${e.seq}`;
        const it = this.push(e, {
          t: "tool",
          id,
          name: b.payload.name ?? "tool",
          input: asObject(b.payload.input),
          path: b.payload.path ?? null,
          status: "running",
          result: null,
        }) as Item & { t: "tool" };
        this.tools.set(id, it);
        return it;
      }
      case "agent.tool_result": {
        const tool = this.tools.get(b.payload.tool_use_id ?? "");
        if (!tool) return this.push(e, { t: "raw", kind: e.kind, payload: e.payload });
        tool.status = b.payload.is_error === true ? "error" : "ok";
        tool.result = b.payload.summary ?? null;
        return tool;
      }
      case "agent.permission.request": {
        const requestId = b.payload.request_id ?? `?${e.seq}`;
        const it = this.push(e, {
          t: "perm",
          requestId,
          toolName: b.payload.tool_name ?? "tool",
          input: asObject(b.payload.input),
          path: b.payload.path ?? null,
          description: b.payload.description ?? null,
          decision: null,
          by: null,
        }) as Item & { t: "perm" };
        this.perms.set(requestId, it);
        return it;
      }
      case "agent.permission.resolved": {
        const perm = this.perms.get(b.payload.request_id ?? "");
        if (!perm) return this.push(e, { t: "sys", text: `permission ${b.payload.decision ?? "resolved"}`, level: "info" });
        perm.decision = b.payload.decision ?? "resolved";
        perm.by = b.payload.by ?? null;
        return perm;
      }
      case "agent.todos":
        return this.push(e, { t: "todos", todos: Array.isArray(b.payload.todos) ? b.payload.todos : [] });
      case "agent.start": {
        const cmd = Array.isArray(b.payload.command) ? b.payload.command.join(" ") : "";
        return this.push(e, { t: "sys", text: `agent started${cmd ? `: ${cmd}` : ""}`, level: "ok" });
      }
      case "agent.exit": {
        const code = b.payload.code ?? null;
        const sig = b.payload.signal ?? null;
        return this.push(e, {
          t: "sys",
          text: `agent exited${code !== null ? ` with code ${code}` : ""}${sig !== null ? ` by signal ${sig}` : ""}`,
          level: code === 0 ? "info" : "warn",
        });
      }
      case "agent.session":
        return this.push(e, { t: "sys", text: `Claude Code session${b.payload.model ? ` · ${b.payload.model}` : ""}`, level: "info" });
      case "agent.result": {
        const secs = b.payload.duration_ms ?? null;
        const cost = b.payload.cost_usd ?? null;
        const bits = [b.payload.is_error === true ? "turn failed" : "turn finished"];
        if (secs !== null) bits.push(`${(secs / 1000).toFixed(1)} s`);
        if (cost !== null) bits.push(`$${cost.toFixed(4)}`);
        return this.push(e, { t: "sys", text: bits.join(" · "), level: b.payload.is_error === true ? "bad" : "ok" });
      }
      case "agent.user":
        return this.push(e, { t: "sys", text: b.payload.text ?? "", level: "info" });
      case "agent.error":
        return this.push(e, { t: "sys", text: `agent error: ${b.payload.message ?? ""}`, level: "bad" });
      case "agent.stalled":
        return this.push(e, { t: "sys", text: `agent silent for ${Math.round((b.payload.silent_ms ?? 0) / 1000)} s (stalled)`, level: "warn" });
      case "agent.active":
        return this.push(e, { t: "sys", text: "agent active again", level: "ok" });
      case "agent.restart":
        return this.push(e, { t: "sys", text: `agent restarted (${b.payload.reason || "?"}, attempt ${b.payload.attempt ?? "?"})`, level: "warn" });
      case "bridge.connected":
        return this.push(e, { t: "sys", text: "bridge connected", level: "ok" });
      case "bridge.disconnected":
        return this.push(e, { t: "sys", text: `bridge disconnected${b.payload.reason ? `: ${b.payload.reason}` : ""}`, level: "warn" });
      case "session.ended":
        return this.push(e, { t: "sys", text: "session ended", level: "info" });
      case "session.continued_from":
        return this.push(e, { t: "sys", text: `continues the ended session ${b.payload.name || b.payload.session}`, level: "info" });
      case "session.continued_in":
        return this.push(e, { t: "sys", text: `continued in session ${b.payload.name || b.payload.session} (moor resume)`, level: "info" });
      case "session.interrupted":
        return this.push(e, { t: "sys", text: `interrupted (${b.payload.cause || "?"}) while ${String(b.payload.phase ?? "?").replace("_", " ")}`, level: "bad" });
      case "input.delivered":
      case "input.applied":
      case "input.uncertain":
        return this.receipt(b.kind, b.payload.input_seq, null);
      case "input.failed":
        return this.receipt(b.kind, b.payload.input_seq, b.payload.reason ?? null);
      case "checkpoint.created":
        return this.push(e, { t: "checkpoint", payload: b.payload });
      case "input.text":
        return this.input(e, b.payload.text ?? "");
      case "input.permission":
        return this.input(e, `${b.payload.decision ?? "?"} permission request`);
      case "input.interrupt":
        return this.input(e, "interrupt");
      case "input.resize":
        return this.input(e, `resize to ${b.payload.cols}×${b.payload.rows}`);
      case "input.keys":
        return this.keys(e, b.payload.text ?? "");
      // Drawn by the terminal, not the transcript.
      case "agent.pty.output":
      case "agent.pty.resize":
      // Shown in the phase line ("waiting at its prompt"), not as an entry of its own.
      case "agent.terminal":
        return null;
      case "agent.event":
      case "agent.tool.intent":
      case "agent.tool.intent_checked":
        return this.push(e, { t: "raw", kind: e.kind, payload: e.payload });
      default:
        // A kind added to the protocol without a case here fails tsc.
        return b satisfies never;
    }
  }

  /** Kinds the protocol does not type (from a newer moor): shown, never dropped. */
  private untyped(e: Entry): Item | null {
    const p = (e.payload && typeof e.payload === "object" && !Array.isArray(e.payload) ? e.payload : {}) as P;
    if (e.kind.startsWith("checkpoint.")) {
      const id = typeof p.id === "string" ? ` ${p.id}` : "";
      return this.push(e, { t: "sys", text: `${e.kind.replace(".", " ")}${id}`, level: "info" });
    }
    if (e.kind.startsWith("input.")) return this.input(e, JSON.stringify(e.payload));
    return this.push(e, { t: "raw", kind: e.kind, payload: e.payload });
  }

  /**
   * Keystrokes fold into one item per burst: the same author's keys, each within KEYS_BURST_MS
   * of the last, until an Enter. The item's receipt is its newest keystroke's.
   */
  private keys(e: Entry, text: string): Item {
    const last = this.items[this.items.length - 1];
    if (
      last?.t === "input" &&
      last.kind === "input.keys" &&
      last.author === e.author &&
      !last.raw.endsWith("\r") &&
      e.ts - last.ts <= KEYS_BURST_MS &&
      last.raw.length < KEYS_BURST_MAX
    ) {
      last.raw += text;
      last.text = `typed ${keyText(last.raw)}`;
      last.ts = e.ts;
      last.receipt = "queued";
      last.reason = null;
      this.inputs.set(e.seq, last);
      return last;
    }
    const it = this.input(e, `typed ${keyText(text)}`) as Item & { t: "input" };
    it.raw = text;
    return it;
  }

  private input(e: Entry, text: string): Item {
    const it = this.push(e, { t: "input", kind: e.kind, text, author: e.author, receipt: "queued", reason: null, raw: "" }) as Item & { t: "input" };
    this.inputs.set(e.seq, it);
    return it;
  }

  private receipt(kind: `input.${Receipt}`, seq: number | undefined, reason: string | null): Item | null {
    const receipt = kind.slice("input.".length) as Receipt;
    if (typeof seq !== "number") return null;
    const input = this.inputs.get(seq);
    if (!input) {
      this.orphanReceipts.set(seq, [receipt, reason]);
      return null;
    }
    // A late "delivered" never downgrades a settled input.
    if (!(receipt === "delivered" && input.receipt !== "queued")) input.receipt = receipt;
    if (receipt === "failed") input.reason = reason;
    return input;
  }
}
