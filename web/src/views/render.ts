// Drawing one transcript item. Pure: item in, element out (the virtual list places it).

import { compactedText } from "../compaction";
import { clock, h } from "../dom";
import type { Item } from "../items";
import type { CheckpointSummary } from "../protocol/CheckpointSummary";
import type { JsonValue } from "../protocol/serde_json/JsonValue";

export interface RenderCtx {
  canControl: boolean;
  decide(requestId: string, decision: "allow" | "deny"): void;
  /** Decisions sent from this page that the log has not resolved yet. */
  deciding: Map<string, string>;
  /** The link to a turn's review, for the entry that is its prompt or its result (or null). */
  review?: (seq: number) => HTMLElement | null;
}

const RECEIPT_TEXT: Record<string, string> = {
  queued: "queued",
  delivered: "delivered to the bridge",
  applied: "applied",
  failed: "failed",
  uncertain: "uncertain: the bridge crashed while applying it",
};

export function receiptBadge(receipt: string, extra?: string | null): HTMLElement {
  return h(`span.receipt.r-${receipt}`, { "data-receipt": receipt }, RECEIPT_TEXT[receipt] ?? receipt, extra ? `: ${extra}` : null);
}

/** A unified-diff-like view of an Edit/MultiEdit/Write tool input. */
export function diffOf(name: string, input: Record<string, JsonValue>): HTMLElement | null {
  const lines: [string, string][] = [];
  const add = (prefix: string, text: unknown, max = 60) => {
    const all = String(text ?? "").split("\n");
    for (const l of all.slice(0, max)) lines.push([prefix, l]);
    if (all.length > max) lines.push([" ", `… ${all.length - max} more lines`]);
  };
  if (name === "Edit") {
    add("-", input.old_string);
    add("+", input.new_string);
  } else if (name === "MultiEdit" && Array.isArray(input.edits)) {
    for (const ed of input.edits as Record<string, JsonValue>[]) {
      add("-", ed.old_string, 20);
      add("+", ed.new_string, 20);
    }
  } else if (name === "Write") {
    add("+", input.content);
  } else {
    return null;
  }
  return h(
    "pre.diff",
    null,
    lines.map(([p, l]) => h(`span.${p === "+" ? "add" : p === "-" ? "del" : "ctx"}`, null, `${p} ${l}\n`)),
  );
}

function toolSummary(name: string, input: Record<string, JsonValue>, path: string | null): string {
  const s = (v: JsonValue | undefined) => (typeof v === "string" ? v : "");
  return path ?? (s(input.command) || s(input.file_path) || s(input.pattern) || s(input.url) || s(input.description) || name);
}

export function renderItem(it: Item, ctx: RenderCtx): HTMLElement {
  // Not an entry of the log (it has no seq of its own): where entries are missing, and why.
  if (it.t === "compacted") {
    return h("div.item.i-compacted", { "data-after": it.after, role: "note" }, h("div.compacted", null, `${compactedText(it.mark)}.`));
  }
  const row = h(`div.item.i-${it.t}`, { "data-seq": it.seq, title: `#${it.seq} · ${clock(it.ts)}` });
  switch (it.t) {
    case "line":
      row.append(h(`pre.line${it.stream === "stderr" ? ".stderr" : ""}`, null, it.text));
      break;
    case "text":
      row.append(
        h(`div.bubble.agent${it.thinking ? ".thinking" : ""}${it.final ? "" : ".streaming"}`, null, it.thinking ? h("em", null, "thinking: ") : null, it.text),
      );
      break;
    case "tool": {
      const status = { running: "running…", ok: "done", error: "error", interrupted: "interrupted: no result" }[it.status];
      row.append(
        h(
          `div.card.tool.st-${it.status}`,
          null,
          h("div.card-head", null, h("b", null, it.name), h("span.muted.ell", null, toolSummary(it.name, it.input, it.path)), h(`span.pill.st-${it.status}`, null, status)),
          diffOf(it.name, it.input),
          it.result !== null ? h("pre.result", null, it.result) : null,
        ),
      );
      break;
    }
    case "perm": {
      const pending = it.decision === null;
      const sent = ctx.deciding.get(it.requestId);
      const buttons =
        pending && ctx.canControl
          ? h(
              "div.actions",
              null,
              h("button.approve", { type: "button", disabled: !!sent, onclick: () => ctx.decide(it.requestId, "allow") }, "Approve"),
              h("button.deny", { type: "button", disabled: !!sent, onclick: () => ctx.decide(it.requestId, "deny") }, "Deny"),
              sent ? h("span.muted", null, `sending ${sent}…`) : null,
            )
          : null;
      row.append(
        h(
          `div.card.perm${pending ? ".pending" : ""}`,
          { "data-request": it.requestId },
          h("div.card-head", null, h("b", null, `${it.toolName} wants permission`), h(`span.pill${pending ? ".st-awaiting" : ""}`, null, pending ? "waiting for a decision" : `${it.decision}${it.by ? ` by ${it.by}` : ""}`)),
          it.description ? h("div.muted", null, it.description) : null,
          h("pre.result", null, toolSummary(it.toolName, it.input, it.path)),
          diffOf(it.toolName, it.input),
          buttons,
        ),
      );
      break;
    }
    case "todos":
      row.append(
        h(
          "div.card.todos",
          null,
          h("div.card-head", null, h("b", null, "Todo list")),
          h(
            "ul",
            null,
            it.todos.map((t) => h(`li.todo-${t.status}`, null, t.status === "completed" ? "✓ " : t.status === "in_progress" ? "▸ " : "○ ", t.content)),
          ),
        ),
      );
      break;
    case "input":
      row.append(
        h(
          "div.bubble.user",
          { "data-input-seq": it.seq },
          h("div", null, it.text),
          h("div.meta", null, it.author.replace(/^user:/, ""), " · ", receiptBadge(it.receipt, it.reason)),
          ctx.review?.(it.seq) ?? null,
        ),
      );
      break;
    case "sys":
      row.append(h(`div.sys.${it.level}`, null, it.text, h("span.muted", null, ` · ${clock(it.ts)}`), ctx.review?.(it.seq) ?? null));
      break;
    case "checkpoint":
      row.append(checkpointCard(it.payload));
      break;
    case "raw":
      row.append(h("div.sys.info", null, h("code", null, it.kind), " ", h("span.muted", null, JSON.stringify(it.payload).slice(0, 300))));
      break;
  }
  return row;
}

const CHANGE_MARK: Record<string, string> = { added: "A", modified: "M", deleted: "D", type_changed: "T" };

/** A `checkpoint.created` entry: why, the totals, the changed paths. */
export function checkpointCard(c: CheckpointSummary, extra?: HTMLElement | null): HTMLElement {
  const files = Array.isArray(c.files) ? c.files : [];
  const stat = c.diffstat ?? { files: files.length, insertions: 0, deletions: 0 };
  return h(
    "div.card.checkpoint",
    { "data-checkpoint": c.id },
    h(
      "div.card-head",
      null,
      h("b", null, "Checkpoint"),
      h("span.muted.ell", null, `${String(c.reason ?? "").replace(/_/g, " ")}${c.branch ? ` · ${c.branch}` : ""}`),
      h("span.pill", null, `${stat.files} files `, h("span.ok", null, `+${stat.insertions}`), " ", h("span.bad", null, `−${stat.deletions}`)),
    ),
    files.length
      ? h(
          "ul.files",
          null,
          files.slice(0, 12).map((f) => h("li", null, h("code", null, CHANGE_MARK[f.status] ?? "?"), " ", f.path)),
          files.length > 12 || c.files_total > files.length ? h("li.muted", null, `… ${c.files_total - Math.min(12, files.length)} more`) : null,
        )
      : null,
    extra ?? null,
  );
}

/** A unified diff (`git diff` output) drawn with added and removed lines marked. */
export function patchView(patch: string, maxLines = 2000): HTMLElement {
  const lines = patch.split("\n");
  return h(
    "pre.diff",
    null,
    lines.slice(0, maxLines).map((l) =>
      h(`span.${l.startsWith("+") && !l.startsWith("+++") ? "add" : l.startsWith("-") && !l.startsWith("---") ? "del" : "ctx"}`, null, `${l}\n`),
    ),
    lines.length > maxLines ? h("span.ctx", null, `… ${lines.length - maxLines} more lines`) : null,
  );
}
