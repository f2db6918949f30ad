// Bottom sheets of the session view: state panel, recovery brief, checkpoints, share (QR).

import qrcode from "qrcode-generator";
import { api, ApiError, token } from "../api";
import { clock, h } from "../dom";
import type { Entry } from "../protocol/Entry";
import type { RecoveryBrief } from "../protocol/RecoveryBrief";
import type { SessionState } from "../protocol/SessionState";
import type { JsonValue } from "../protocol/serde_json/JsonValue";
import type { CheckpointSummary } from "../protocol/CheckpointSummary";
import { checkpointCard, patchView, receiptBadge } from "./render";

/** Opens a modal sheet; returns the body element to fill and a close function. */
export function sheet(title: string): { body: HTMLElement; close: () => void } {
  const body = h("div.sheet-body");
  const close = () => back.remove();
  const back = h(
    "div.sheet-back",
    { onclick: (e: Event) => e.target === back && close() },
    h("section.sheet", { role: "dialog", "aria-label": title }, h("header.sheet-head", null, h("h2", null, title), h("button.icon", { type: "button", onclick: close, "aria-label": "Close" }, "✕")), body),
  );
  document.body.append(back);
  return { body, close };
}

export const PHASE_TEXT: Record<string, string> = {
  idle: "idle, waiting for a prompt",
  model_streaming: "the model is answering",
  tool_running: "a tool is running",
  awaiting_permission: "waiting for a permission decision",
  interrupted: "interrupted",
  ended: "ended",
};

function section(title: string, ...content: (Node | string | null)[]): HTMLElement {
  return h("div.panel-sec", null, h("h3", null, title), ...content);
}

export function statePanel(s: SessionState | null): HTMLElement {
  if (!s) return h("p.muted", null, "No state received yet.");
  const todos = Array.isArray(s.todos) ? (s.todos as { content: string; status: string }[]) : [];
  return h(
    "div.panel",
    { "data-phase": s.phase },
    section("Phase", h("p", null, h("b", null, PHASE_TEXT[s.phase] ?? s.phase), s.agent.stalled ? h("span.pill.st-error", null, " stalled") : null)),
    section(
      "Agent",
      h(
        "p.muted",
        null,
        s.agent.running ? "running" : "not running",
        s.agent.model ? ` · ${s.agent.model}` : "",
        s.agent.cwd ? ` · ${s.agent.cwd}` : "",
        s.agent.restarts ? ` · restarted ${s.agent.restarts}×` : "",
      ),
    ),
    section(
      `Open tool calls (${s.open_tools.length})`,
      s.open_tools.length
        ? h("ul", null, s.open_tools.map((t) => h("li", null, h("b", null, t.tool), " ", t.target ?? "", h("span.muted", null, ` · since ${clock(t.started_at)}`))))
        : h("p.muted", null, "none"),
    ),
    section(
      `Pending permission requests (${s.pending_permissions.length})`,
      s.pending_permissions.length ? h("ul", null, s.pending_permissions.map((p) => h("li", null, p.tool_name, p.path ? ` · ${p.path}` : ""))) : h("p.muted", null, "none"),
    ),
    section(
      "Inputs",
      s.inputs.length ? h("ul", null, s.inputs.map((i) => h("li", null, `#${i.seq} ${i.kind} `, receiptBadge(i.status)))) : h("p.muted", null, "none"),
    ),
    todos.length ? section("Todos", h("ul", null, todos.map((t) => h(`li.todo-${t.status}`, null, t.content)))) : null,
    s.files_touched.length ? section("Files touched", h("ul", null, s.files_touched.map((f) => h("li", null, h("code", null, f))))) : null,
    section("Counts", h("p.muted", null, `${s.counts.entries} entries · ${s.counts.tool_calls} tool calls · ${s.counts.turns} turns · ${s.counts.errors} errors · ${s.counts.interruptions} interruptions`)),
  );
}

export async function recoveryPanel(sessionId: string, onResume: ((prompt: string) => void) | null): Promise<HTMLElement> {
  let b: RecoveryBrief;
  try {
    b = await api.recovery(sessionId);
  } catch (e) {
    return h("p.bad", null, `Could not load the recovery brief: ${(e as Error).message}`);
  }
  const tools = (list: RecoveryBrief["completed"]) =>
    list.length
      ? h(
          "ul",
          null,
          list.map((t) => h("li", null, h("b", null, t.tool), " ", t.target ?? "", h("div.muted", null, t.note), h("div", null, t.advice))),
        )
      : h("p.muted", null, "none");
  return h(
    "div.panel.recovery",
    null,
    section("Goal", b.goal.length ? h("ul", null, b.goal.map((g) => h("li", null, g))) : h("p.muted", null, "no prompt recorded")),
    section("Uncertain (no result came back)", tools(b.uncertain)),
    section("Completed", tools(b.completed)),
    b.partial_answer ? section("Partial answer", h("pre.result", null, b.partial_answer)) : null,
    b.files_changed.length ? section("Files changed since the last checkpoint", h("ul", null, b.files_changed.map((f) => h("li", null, h("code", null, f))))) : null,
    section("Resume prompt", h("pre.result", null, b.resume_prompt)),
    onResume ? h("div.actions", null, h("button.approve", { type: "button", onclick: () => onResume(b.resume_prompt) }, "Resume with this prompt")) : null,
  );
}

/**
 * Checkpoints of the session, newest first, each with its diff on demand: the server's list
 * (every uploaded checkpoint, however old), then those the log announced that are not uploaded
 * yet (their contents are still on the bridge's machine).
 */
export async function checkpointsPanel(sessionId: string, entries: Entry[], last: JsonValue | null): Promise<HTMLElement> {
  let stored: CheckpointSummary[] = [];
  let listError: string | null = null;
  try {
    stored = await api.checkpoints(sessionId);
  } catch (e) {
    listError = (e as Error).message;
  }
  const known = new Set(stored.map((c) => c.id));
  const announced = entries.filter((e) => e.kind === "checkpoint.created").map((e) => e.payload as unknown as CheckpointSummary);
  if (last) announced.push(last as unknown as CheckpointSummary);
  const pending: CheckpointSummary[] = [];
  for (const c of announced.reverse()) {
    if (c && typeof c.id === "string" && !known.has(c.id)) {
      known.add(c.id);
      pending.push(c);
    }
  }
  const all = [...pending, ...stored].sort((a, b) => b.created_at - a.created_at);
  const note = listError ? h("p.bad", null, `Could not list the server's checkpoints: ${listError}`) : null;
  if (!all.length) return h("div.panel", null, note, h("p.muted", null, "No checkpoints in this session yet."));
  const uploaded = new Set(stored.map((c) => c.id));
  return h(
    "div.panel.checkpoints",
    null,
    note,
    all.map((c) => {
      const slot = h("div.diff-slot");
      const btn = h(
        "button.show-diff",
        {
          type: "button",
          onclick: async () => {
            btn.setAttribute("disabled", "");
            slot.replaceChildren(h("p.muted", null, "Loading the diff…"));
            try {
              const patch = await api.checkpointPatch(c.id);
              slot.replaceChildren(patch ? patchView(patch) : h("p.muted", null, "No changes against the base commit."));
            } catch (e) {
              btn.removeAttribute("disabled");
              slot.replaceChildren(
                h("p.muted", null, e instanceof ApiError && e.status === 404 ? "This server does not hold this checkpoint's contents (yet)." : `Could not load the diff: ${(e as Error).message}`),
              );
            }
          },
        },
        "Show diff",
      );
      const where = uploaded.has(c.id) ? null : h("span.muted", null, " · not uploaded yet");
      return h("div.panel-sec", { "data-checkpoint-id": c.id }, h("h3", null, clock(c.created_at), where), checkpointCard(c, h("div.actions", null, btn)), slot);
    }),
  );
}

export function sharePanel(sessionId: string, name: string): HTMLElement {
  const base = `${location.origin}/#/s/${encodeURIComponent(sessionId)}`;
  const qrBox = h("div.qr");
  const link = h("input.share-url", { readonly: true, value: base }) as HTMLInputElement;
  const withToken = h("input", { type: "checkbox" }) as HTMLInputElement;
  const draw = () => {
    const url = withToken.checked ? `${base}&token=${encodeURIComponent(token())}` : base;
    link.value = url;
    const qr = qrcode(0, "M");
    qr.addData(url);
    qr.make();
    qrBox.innerHTML = qr.createSvgTag({ cellSize: 4, margin: 2, scalable: true });
  };
  withToken.addEventListener("change", draw);
  draw();
  return h(
    "div.panel.share",
    null,
    h("p", null, "Open ", h("b", null, name), " on another device:"),
    qrBox,
    link,
    h(
      "div.actions",
      null,
      h("button", { type: "button", onclick: () => void navigator.clipboard?.writeText(link.value) }, "Copy link"),
    ),
    h("label.check", null, withToken, " include my access token (full access: share only with yourself)"),
    h("p.muted", null, "Read-only share links come with accounts and roles; until then a link without a token asks for one."),
  );
}
