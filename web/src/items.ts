// The transcript's render model: log entries folded into display items. Streaming text deltas
// grow one text item, a tool call and its result share one card, a permission request becomes a
// card its resolution updates, an input carries its receipts. Unknown kinds are shown, not
// dropped. Every item remembers the seq that created it and counts the entries folded into it.

import type { Entry } from "./protocol/Entry";
import type { JsonValue } from "./protocol/serde_json/JsonValue";

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
        status: "running" | "ok" | "error";
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
    | { t: "todos"; todos: { content: string; status: string }[] }
    | { t: "input"; kind: string; text: string; author: string; receipt: Receipt; reason: string | null }
    | { t: "sys"; text: string; level: "info" | "warn" | "bad" | "ok" }
    | { t: "checkpoint"; payload: Record<string, JsonValue> }
    | { t: "raw"; kind: string; payload: JsonValue }
  );

type P = Record<string, JsonValue>;
type Body = Item extends unknown ? (Item extends infer I ? (I extends Item ? Omit<I, keyof Base> : never) : never) : never;

const str = (p: P, k: string): string | null => (typeof p[k] === "string" ? (p[k] as string) : null);
const num = (p: P, k: string): number | null => (typeof p[k] === "number" ? (p[k] as number) : null);

/** Kinds that draw nothing in the transcript (shown elsewhere, or noise). */
const SILENT = new Set(["agent.pty.output", "agent.pty.resize"]);

export class ItemModel {
  items: Item[] = [];
  private texts = new Map<string, Item & { t: "text" }>();
  private tools = new Map<string, Item & { t: "tool" }>();
  private perms = new Map<string, Item & { t: "perm" }>();
  private inputs = new Map<number, Item & { t: "input" }>();
  /** Receipts that arrived for inputs not (yet) in the model, e.g. above a page boundary. */
  private orphanReceipts = new Map<number, [Receipt, string | null]>();

  /** Rebuilds from scratch (after older entries were prepended). */
  rebuild(entries: Entry[]): void {
    this.items = [];
    this.texts.clear();
    this.tools.clear();
    this.perms.clear();
    this.inputs.clear();
    this.orphanReceipts.clear();
    this.apply(entries);
  }

  /** Folds entries in; returns the items that changed (new ones are appended to `items`). */
  apply(entries: Entry[]): Set<Item> {
    const changed = new Set<Item>();
    for (const e of entries) {
      const it = this.one(e);
      if (it) {
        it.v += 1;
        changed.add(it);
      }
    }
    return changed;
  }

  private push(e: Entry, rest: Body): Item {
    const item = { key: `s${e.seq}`, seq: e.seq, ts: e.ts, v: 0, ...rest } as Item;
    this.items.push(item);
    return item;
  }

  private one(e: Entry): Item | null {
    const p = (e.payload && typeof e.payload === "object" && !Array.isArray(e.payload) ? e.payload : {}) as P;
    switch (e.kind) {
      case "agent.output":
        return this.push(e, { t: "line", text: str(p, "text") ?? "", stream: str(p, "stream") ?? "stdout" });
      case "agent.text.delta":
      case "agent.text":
      case "agent.thinking": {
        const mid = str(p, "message_id") ?? "?";
        const text = str(p, "text") ?? "";
        if (e.kind === "agent.text.delta") {
          const cur = this.texts.get(mid);
          if (cur && !cur.final) {
            cur.text += text;
            return cur;
          }
          const it = this.push(e, { t: "text", messageId: mid, text, final: false, thinking: false }) as Item & { t: "text" };
          this.texts.set(mid, it);
          return it;
        }
        if (e.kind === "agent.text") {
          const cur = this.texts.get(mid);
          if (cur && !cur.final) {
            cur.text = text;
            cur.final = true;
            return cur;
          }
        }
        const it = this.push(e, { t: "text", messageId: mid, text, final: true, thinking: e.kind === "agent.thinking" });
        return it;
      }
      case "agent.tool_use": {
        const id = str(p, "id") ?? `?${e.seq}`;
        const it = this.push(e, {
          t: "tool",
          id,
          name: str(p, "name") ?? "tool",
          input: (p.input && typeof p.input === "object" ? p.input : {}) as P,
          path: str(p, "path"),
          status: "running",
          result: null,
        }) as Item & { t: "tool" };
        this.tools.set(id, it);
        return it;
      }
      case "agent.tool_result": {
        const tool = this.tools.get(str(p, "tool_use_id") ?? "");
        if (!tool) return this.push(e, { t: "raw", kind: e.kind, payload: e.payload });
        tool.status = p.is_error === true ? "error" : "ok";
        tool.result = str(p, "summary");
        return tool;
      }
      case "agent.permission.request": {
        const requestId = str(p, "request_id") ?? `?${e.seq}`;
        const it = this.push(e, {
          t: "perm",
          requestId,
          toolName: str(p, "tool_name") ?? "tool",
          input: (p.input && typeof p.input === "object" ? p.input : {}) as P,
          path: str(p, "path"),
          description: str(p, "description"),
          decision: null,
          by: null,
        }) as Item & { t: "perm" };
        this.perms.set(requestId, it);
        return it;
      }
      case "agent.permission.resolved": {
        const perm = this.perms.get(str(p, "request_id") ?? "");
        if (!perm) return this.push(e, { t: "sys", text: `permission ${str(p, "decision") ?? "resolved"}`, level: "info" });
        perm.decision = str(p, "decision") ?? "resolved";
        perm.by = str(p, "by");
        return perm;
      }
      case "agent.todos": {
        const todos = Array.isArray(p.todos) ? (p.todos as { content: string; status: string }[]) : [];
        return this.push(e, { t: "todos", todos });
      }
      case "agent.start": {
        const cmd = Array.isArray(p.command) ? (p.command as string[]).join(" ") : "";
        return this.push(e, { t: "sys", text: `agent started${cmd ? `: ${cmd}` : ""}`, level: "ok" });
      }
      case "agent.exit": {
        const code = num(p, "code");
        const sig = num(p, "signal");
        return this.push(e, {
          t: "sys",
          text: `agent exited${code !== null ? ` with code ${code}` : ""}${sig !== null ? ` by signal ${sig}` : ""}`,
          level: code === 0 ? "info" : "warn",
        });
      }
      case "agent.session":
        return this.push(e, { t: "sys", text: `Claude Code session${str(p, "model") ? ` · ${str(p, "model")}` : ""}`, level: "info" });
      case "agent.result": {
        const secs = num(p, "duration_ms");
        const cost = num(p, "cost_usd");
        const bits = [p.is_error === true ? "turn failed" : "turn finished"];
        if (secs !== null) bits.push(`${(secs / 1000).toFixed(1)} s`);
        if (cost !== null) bits.push(`$${cost.toFixed(4)}`);
        return this.push(e, { t: "sys", text: bits.join(" · "), level: p.is_error === true ? "bad" : "ok" });
      }
      case "agent.user":
        return this.push(e, { t: "sys", text: str(p, "text") ?? "", level: "info" });
      case "agent.error":
        return this.push(e, { t: "sys", text: `agent error: ${str(p, "message") ?? ""}`, level: "bad" });
      case "agent.stalled":
        return this.push(e, { t: "sys", text: `agent silent for ${Math.round((num(p, "silent_ms") ?? 0) / 1000)} s (stalled)`, level: "warn" });
      case "agent.active":
        return this.push(e, { t: "sys", text: "agent active again", level: "ok" });
      case "agent.restart":
        return this.push(e, { t: "sys", text: `agent restarted (${str(p, "reason") ?? "?"}, attempt ${num(p, "attempt") ?? "?"})`, level: "warn" });
      case "bridge.connected":
        return this.push(e, { t: "sys", text: "bridge connected", level: "ok" });
      case "bridge.disconnected":
        return this.push(e, { t: "sys", text: `bridge disconnected${str(p, "reason") ? `: ${str(p, "reason")}` : ""}`, level: "warn" });
      case "session.ended":
        return this.push(e, { t: "sys", text: "session ended", level: "info" });
      case "session.interrupted":
        return this.push(e, { t: "sys", text: `interrupted (${str(p, "cause") ?? "?"}) while ${String(p.phase ?? "?").replace("_", " ")}`, level: "bad" });
      case "input.delivered":
      case "input.applied":
      case "input.failed":
      case "input.uncertain": {
        const seq = num(p, "input_seq");
        const receipt = e.kind.slice("input.".length) as Receipt;
        if (seq === null) return null;
        const input = this.inputs.get(seq);
        if (!input) {
          this.orphanReceipts.set(seq, [receipt, str(p, "reason")]);
          return null;
        }
        // A late "delivered" never downgrades a settled input.
        if (!(receipt === "delivered" && input.receipt !== "queued")) input.receipt = receipt;
        if (receipt === "failed") input.reason = str(p, "reason");
        return input;
      }
    }
    if (e.kind === "checkpoint.created") return this.push(e, { t: "checkpoint", payload: p });
    if (e.kind.startsWith("checkpoint.")) {
      return this.push(e, { t: "sys", text: `${e.kind.replace(".", " ")}${str(p, "id") ? ` ${str(p, "id")}` : ""}`, level: "info" });
    }
    if (e.kind.startsWith("input.")) {
      let text: string;
      if (e.kind === "input.text") text = str(p, "text") ?? "";
      else if (e.kind === "input.permission") text = `${str(p, "decision") ?? "?"} permission request`;
      else if (e.kind === "input.interrupt") text = "interrupt";
      else if (e.kind === "input.resize") text = `resize to ${num(p, "cols")}×${num(p, "rows")}`;
      else if (e.kind === "input.keys") text = `keys ${JSON.stringify(str(p, "text") ?? "…")}`;
      else text = JSON.stringify(p);
      const it = this.push(e, { t: "input", kind: e.kind, text, author: e.author, receipt: "queued", reason: null }) as Item & {
        t: "input";
      };
      this.inputs.set(e.seq, it);
      return it;
    }
    if (SILENT.has(e.kind)) return null;
    return this.push(e, { t: "raw", kind: e.kind, payload: e.payload });
  }
}
