// The session list: what runs, where, whether its bridge is there, when it last did something.

import { api, ApiError } from "../api";
import { ago, clock, h, themeButton } from "../dom";
import { ListDetails, needsCount, setNeedCount, setNeedCountUnknown, setTitle } from "../attention";
import { needOf, seenTurns, sortForList } from "../needs";
import type { SessionInfo } from "../protocol/SessionInfo";
import type { SessionState } from "../protocol/SessionState";
import { mutesPanel, notifySwitch, quietPanel, sinksPanel } from "./notify";
import { invitations } from "./offers";

const REFRESH_MS = 5000;

function statusOf(s: SessionInfo): { cls: string; text: string } {
  if (s.status === "ended") return { cls: "muted", text: "ended" };
  if (s.bridge.online) return { cls: "ok", text: "live" };
  if (s.bridge.since === null) return { cls: "muted", text: "waiting for a bridge" };
  return { cls: "bad", text: `bridge offline since ${clock(s.bridge.since)}` };
}

function card(s: SessionInfo, state: SessionState | null): HTMLElement {
  const st = statusOf(s);
  const why = needOf(s, state, seenTurns(s.id));
  const need = why?.text ?? null;
  const a = s.agent;
  const watchers = (s as SessionInfo & { watchers?: number }).watchers;
  return h(
    "a.session-card",
    { href: `#/s/${encodeURIComponent(s.id)}`, "data-session": s.id, "data-needs-you": why?.need ?? null, class: need ? "needs-you" : null },
    h("div.row", null, h("b.ell", null, s.name), h("div.spacer"), h(`span.pill.${st.cls}`, null, st.text)),
    need ? h("div.need", null, h("span.badge", null, "needs you"), ` ${need}`) : null,
    a ? h("div.muted.ell", null, `${a.adapter} · ${a.command.join(" ")}`) : null,
    a ? h("div.muted.ell", null, `${a.host}:${a.cwd}`) : null,
    h(
      "div.muted",
      null,
      `last activity ${ago(s.last_activity)} · ${s.head_seq} entries`,
      watchers !== undefined ? ` · ${watchers} watching` : "",
    ),
  );
}

export function listView(root: HTMLElement): () => void {
  setTitle("Mooring");
  const body = h("div.list", { id: "sessions" });
  const note = h("div.banner", { id: "list-banner" });
  const who = h("span.muted.who", { id: "who" });
  const invites = invitations(() => void refresh());
  root.replaceChildren(
    h("header.top", null, h("div.row", null, h("h1.title", null, "Mooring"), h("div.spacer"), who, h("a.tb", { href: "#/machines", id: "machines-link" }, "Machines"), logoutButton(), themeButton())),
    note,
    h("main.list-main", null, notifySwitch(), mutesPanel(), quietPanel(), sinksPanel(), invites.el, body),
  );
  api.me(true).then(
    (me) => {
      who.textContent = me.bootstrap ? "admin token" : me.name;
    },
    () => {},
  );
  let timer: ReturnType<typeof setTimeout> | null = null;
  let stopped = false;
  const details = new ListDetails();
  /** The cards, what needs you first; the title and the app badge count those. */
  const draw = (sessions: SessionInfo[]) => {
    const need = (s: SessionInfo) => needOf(s, details.state(s.id), seenTurns(s.id))?.need ?? null;
    const sorted = sortForList(sessions, need);
    body.replaceChildren(...sorted.map((s) => card(s, details.state(s.id))));
    setNeedCount(needsCount(sessions, details));
    if (!sessions.length) body.append(emptyState(location.origin));
  };
  const refresh = async () => {
    if (timer) clearTimeout(timer);
    try {
      const [sessions] = await Promise.all([api.sessions(), invites.refresh()]);
      draw(sessions);
      note.className = "banner";
      note.textContent = "";
      if (await details.refresh(sessions)) {
        if (stopped) return;
        draw(sessions);
      }
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        // The login page is on its way (api.ts), and comes back here.
        return;
      } else {
        note.className = "banner bad";
        note.textContent = `Cannot reach moord (${(e as Error).message}); retrying.`;
        setNeedCountUnknown();
      }
    }
    if (!stopped) timer = setTimeout(refresh, REFRESH_MS);
  };
  void refresh();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
  };
}

/** The empty list: this server's address and the two commands that attach an agent to it. */
export function emptyState(origin: string): HTMLElement {
  const cmd = (text: string) => h("pre.cmd", null, h("code", null, text));
  return h(
    "div.empty",
    { id: "empty-state" },
    h("p", null, "No sessions yet. On the machine where the agent should run:"),
    h("p.muted", null, "1. log in to this server (once):"),
    cmd(`moor login ${origin}`),
    h("p.muted", null, "2. start an agent under moor:"),
    cmd("moor run -- claude"),
    h("p.muted", null, "It shows up here as soon as it connects."),
  );
}

/** Logs out: the server revokes this login (its cookies are cleared); a stored token is forgotten. */
export function logoutButton(): HTMLElement {
  return h(
    "button.tb",
    {
      type: "button",
      id: "logout",
      onclick: async () => {
        try {
          await api.logout();
        } catch {
          // Logged out already, or only a token: forgetting it below is all there is to do.
        }
        localStorage.removeItem("moor.token");
        location.hash = "#/login";
      },
    },
    "Log out",
  );
}
