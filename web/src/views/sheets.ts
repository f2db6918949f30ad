// Bottom sheets of the session view: state panel, recovery brief, checkpoints, share (QR),
// export.

import qrcode from "qrcode-generator";
import { api, ApiError, explain, type Role, type SessionMember, type ShareLink, type ShareLinkInfo } from "../api";
import { clock, h } from "../dom";
import { payloadOf } from "../entries";
import type { Entry } from "../protocol/Entry";
import type { RecoveryBrief } from "../protocol/RecoveryBrief";
import type { SessionState } from "../protocol/SessionState";
import { phaseText } from "../phase";
import type { JsonValue } from "../protocol/serde_json/JsonValue";
import type { CheckpointSummary } from "../protocol/CheckpointSummary";
import { addedText } from "./offers";
import { checkpointCard, patchView, receiptBadge } from "./render";
import { machineOf, restoreControl } from "./restore";

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

function section(title: string, ...content: (Node | string | null)[]): HTMLElement {
  return h("div.panel-sec", null, h("h3", null, title), ...content);
}

export function statePanel(s: SessionState | null): HTMLElement {
  if (!s) return h("p.muted", null, "No state received yet.");
  const todos = Array.isArray(s.todos) ? (s.todos as { content: string; status: string }[]) : [];
  return h(
    "div.panel",
    { "data-phase": s.phase },
    section("Phase", h("p", null, h("b", null, phaseText(s)), s.agent.stalled ? h("span.pill.st-error", null, " stalled") : null)),
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
    s.interrupted.tools.length || s.interrupted.permissions.length
      ? section(
          "Cut off when the agent stopped",
          h(
            "ul",
            null,
            ...s.interrupted.tools.map((t) => h("li", null, h("b", null, t.tool), " ", t.target ?? "", h("span.muted", null, " · no result: check before repeating"))),
            ...s.interrupted.permissions.map((p) => h("li", null, p.tool_name, p.path ? ` · ${p.path}` : "", h("span.muted", null, " · request expired undecided"))),
          ),
        )
      : null,
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
export async function checkpointsPanel(sessionId: string, entries: Entry[], last: JsonValue | null, sessionName?: string): Promise<HTMLElement> {
  let stored: CheckpointSummary[] = [];
  let listError: string | null = null;
  try {
    stored = await api.checkpoints(sessionId);
  } catch (e) {
    listError = (e as Error).message;
  }
  const known = new Set(stored.map((c) => c.id));
  const announced = entries.flatMap((e) => payloadOf(e, "checkpoint.created") ?? []);
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
  // On a machine the caller may act on, an uploaded checkpoint can go onto a new branch there.
  const machine = sessionName ? await machineOf(sessionName) : null;
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
              const patch = await api.checkpointPatch(sessionId, c.id);
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
      const restore = machine && sessionName && uploaded.has(c.id) ? restoreControl(machine, sessionName, c.id) : null;
      return h("div.panel-sec", { "data-checkpoint-id": c.id }, h("h3", null, clock(c.created_at), where), checkpointCard(c, h("div.actions", null, btn)), restore, slot);
    }),
  );
}

function qrSvg(text: string): string {
  const qr = qrcode(0, "M");
  qr.addData(text);
  qr.make();
  return qr.createSvgTag({ cellSize: 4, margin: 2, scalable: true });
}

function select(id: string, options: [string, string][], value: string): HTMLSelectElement {
  const el = h("select", { id }, options.map(([v, label]) => h("option", { value: v, selected: v === value }, label))) as HTMLSelectElement;
  return el;
}

const EXPIRY: [string, string][] = [
  ["3600", "1 hour"],
  ["86400", "1 day"],
  ["604800", "7 days"],
  ["2592000", "30 days"],
];

const ROLE_TEXT: Record<Role, string> = { viewer: "can watch", controller: "can watch and steer", owner: "owns it" };

/** Whether a listed link can still be redeemed. */
function linkLive(l: ShareLinkInfo, now = Date.now()): boolean {
  return l.revoked_at === null && l.expires_at > now && l.uses_left > 0;
}

function usesText(l: ShareLinkInfo): string {
  const left = l.max_uses === null ? `${l.uses_left}` : `${l.uses_left} of ${l.max_uses}`;
  return `${left} ${(l.max_uses ?? l.uses_left) === 1 ? "use" : "uses"} left`;
}

/**
 * The owner's share dialog: share links (role, expiry, uses) with a QR code, the session's live
 * links (Revoke), and its members and pending offers (role change, Remove, add by name: an
 * offer the user accepts). Both lists come from the
 * server and are read again after every change, so they show what other pages did too.
 */
export function sharePanel(sessionId: string, name: string): HTMLElement {
  let me: string | null = null;
  void api.me(true).then(
    (m) => {
      me = m.name;
      drawMembers();
    },
    () => undefined,
  );

  // ---- the lists, as the server has them
  let links: ShareLinkInfo[] = [];
  let members: SessionMember[] = [];
  const linkList = h("ul.share-links", { id: "share-links", hidden: true });
  const noLinks = h("p.muted", { id: "share-links-none" }, "No link of this session can be opened now.");
  const memberList = h("ul.share-links.members", { id: "share-members", hidden: true });
  const listStatus = h("p.bad", { id: "share-list-error", role: "alert", hidden: true });
  const failed = (what: string, e: unknown) => {
    listStatus.textContent = `Could not ${what}: ${explain(e)}`;
    listStatus.hidden = false;
  };
  const refresh = async () => {
    try {
      [links, members] = await Promise.all([api.shareLinks(sessionId), api.members(sessionId)]);
      listStatus.hidden = true;
    } catch (e) {
      failed("load who this session is shared with", e);
    }
    drawLinks();
    drawMembers();
  };
  /** Runs one change from a list row, with its button disabled meanwhile, then re-reads both lists. */
  const change = async (button: HTMLElement, what: string, act: () => Promise<unknown>) => {
    button.setAttribute("disabled", "");
    try {
      await act();
    } catch (e) {
      failed(what, e);
    }
    await refresh();
  };
  const drawLinks = () => {
    const live = links.filter((l) => linkLive(l));
    linkList.replaceChildren(
      ...live.map((l) => {
        const revoke = h("button.link", { type: "button", onclick: () => void change(revoke, "revoke the link", () => api.revokeShareLink(l.id)) }, "Revoke");
        const text = h("span.muted", null, `${l.role} · ${usesText(l)} · until ${clock(l.expires_at)}`);
        return h("li", { "data-link": l.id, "data-role": l.role, "data-uses-left": String(l.uses_left) }, text, revoke);
      }),
    );
    linkList.hidden = live.length === 0;
    noLinks.hidden = live.length > 0;
  };
  const drawMembers = () => {
    memberList.replaceChildren(
      ...members.map((m) => {
        const who = h("span", null, h("b", null, m.principal), m.principal === me ? h("span.muted", null, " (you)") : null, m.via_link ? h("span.muted", null, " · through a link") : null, m.pending ? h("span.muted.member-offered", null, ` · offered, until ${clock(m.offer_expires_at)}`) : null);
        // Yourself, and the admin token (it owns every session whatever the list says): no controls.
        if (m.principal === me || m.principal === "admin") {
          return h("li", { "data-member": m.principal, "data-role": m.role }, who, h("span.muted", null, m.principal === "admin" ? "admin token" : m.role));
        }
        const roleOf = select(`member-role-${m.principal}`, [["viewer", "viewer"], ["controller", "controller"], ["owner", "owner"]], m.role);
        roleOf.classList.add("member-role-of");
        roleOf.setAttribute("aria-label", `${m.principal}'s role`);
        roleOf.onchange = () => void change(roleOf, "change the role", () => api.putMember(sessionId, m.principal, roleOf.value as Role));
        const remove = h("button.link.member-remove", { type: "button", onclick: () => void change(remove, "remove them", () => api.removeMember(sessionId, m.principal)) }, "Remove");
        return h("li", { "data-member": m.principal, "data-role": m.role, "data-pending": String(m.pending) }, who, h("span.actions", null, roleOf, remove));
      }),
    );
    memberList.hidden = members.length === 0;
  };

  // ---- a new share link
  const role = select("share-role", [["viewer", ROLE_TEXT.viewer], ["controller", ROLE_TEXT.controller]], "viewer");
  const expiry = select("share-expiry", EXPIRY, "86400");
  const uses = h("input", { id: "share-uses", type: "number", min: 1, max: 1000, value: 1, inputmode: "numeric" }) as HTMLInputElement;
  const linkErr = h("p.form-error", { id: "share-error", role: "alert", hidden: true });
  const result = h("div.share-result", { id: "share-result", hidden: true });
  const show = (l: ShareLink) => {
    const url = h("input.share-url", { id: "share-url", readonly: true, value: l.url }) as HTMLInputElement;
    const qr = h("div.qr", { id: "share-qr" });
    qr.innerHTML = qrSvg(l.url);
    result.replaceChildren(
      qr,
      url,
      h("div.actions", null, h("button", { type: "button", onclick: () => void navigator.clipboard?.writeText(l.url) }, "Copy link")),
      h("p.muted", null, `Anyone who opens it and logs in ${ROLE_TEXT[l.role]} this session. It is shown only now.`),
    );
    result.hidden = false;
  };
  const create = h(
    "button.primary",
    {
      type: "button",
      id: "share-create",
      onclick: async () => {
        linkErr.hidden = true;
        const n = Number(uses.value);
        if (!Number.isInteger(n) || n < 1 || n > 1000) {
          linkErr.textContent = "Uses: a whole number from 1 to 1000.";
          linkErr.hidden = false;
          return;
        }
        create.setAttribute("disabled", "");
        try {
          show(await api.createShareLink(sessionId, role.value as Role, Number(expiry.value), n));
          await refresh();
        } catch (e) {
          linkErr.textContent = explain(e);
          linkErr.hidden = false;
        } finally {
          create.removeAttribute("disabled");
        }
      },
    },
    "Create link",
  );

  // ---- a new member by name
  const member = h("input", { id: "member-name", placeholder: "user name", autocomplete: "off", autocapitalize: "off", spellcheck: false }) as HTMLInputElement;
  const memberRole = select("member-role", [["viewer", "viewer"], ["controller", "controller"], ["owner", "owner"]], "viewer");
  const memberStatus = h("p", { id: "member-status", role: "status" });
  const add = h("form.share-row", {
    onsubmit: async (e: Event) => {
      e.preventDefault();
      const who = member.value.trim();
      if (!who) return;
      memberStatus.className = "muted";
      memberStatus.textContent = "Adding…";
      try {
        const answer = await api.putMember(sessionId, who, memberRole.value as Role);
        memberStatus.className = "ok";
        memberStatus.textContent = addedText(who, memberRole.value as Role, answer);
        member.value = "";
        await refresh();
      } catch (e) {
        memberStatus.className = "bad";
        memberStatus.textContent = e instanceof ApiError && e.status === 404 ? `There is no user called ${who}.` : explain(e);
      }
    },
  }, member, memberRole, h("button", { type: "submit", id: "member-add" }, "Add"));

  void refresh();
  const here = `${location.origin}/#/s/${encodeURIComponent(sessionId)}`;
  return h(
    "div.panel.share",
    null,
    section(
      "Share link",
      h("p.muted", null, "A link, and a QR code for phones, that gives ", h("b", null, name), " to whoever opens it and logs in."),
      h("div.share-row", null, role, expiry, h("label.uses", null, uses, " uses")),
      linkErr,
      h("div.actions", null, create),
      result,
    ),
    section("Active links", linkList, noLinks),
    section("People", memberList, listStatus, add, memberStatus),
    section("Open it on your other devices", h("input.share-url", { readonly: true, value: here })),
  );
}

/** Download buttons for the session's log as JSONL (every entry) or Markdown (the transcript). */
export function exportPanel(sessionId: string, name: string): HTMLElement {
  const status = h("p.muted", { id: "export-status" }, "The whole log up to now, as a file.");
  const download = async (format: "jsonl" | "markdown") => {
    status.textContent = "Preparing…";
    try {
      const blob = await api.exportSession(sessionId, format);
      const a = h("a", { href: URL.createObjectURL(blob), download: `moor-session-${name}.${format === "jsonl" ? "jsonl" : "md"}` }) as HTMLAnchorElement;
      a.click();
      setTimeout(() => URL.revokeObjectURL(a.href), 60_000);
      status.textContent = `Downloaded (${blob.size} bytes).`;
    } catch (e) {
      status.textContent = `Export failed: ${explain(e)}`;
    }
  };
  return h(
    "div.panel",
    null,
    h("button.tb", { type: "button", id: "export-md", onclick: () => void download("markdown") }, "Transcript (Markdown)"),
    " ",
    h("button.tb", { type: "button", id: "export-jsonl", onclick: () => void download("jsonl") }, "Every entry (JSONL)"),
    status,
  );
}
