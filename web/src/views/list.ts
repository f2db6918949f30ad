// The session list: what runs, where, whether its bridge is there, when it last did something.

import { api, ApiError } from "../api";
import { ago, clock, h, themeButton } from "../dom";
import type { SessionInfo } from "../protocol/SessionInfo";
import { notifySwitch, sinksPanel } from "./notify";
import { invitations } from "./offers";

const REFRESH_MS = 5000;

function statusOf(s: SessionInfo): { cls: string; text: string } {
  if (s.status === "ended") return { cls: "muted", text: "ended" };
  if (s.bridge.online) return { cls: "ok", text: "live" };
  if (s.bridge.since === null) return { cls: "muted", text: "waiting for a bridge" };
  return { cls: "bad", text: `bridge offline since ${clock(s.bridge.since)}` };
}

/**
 * Why a session waits on a person, in words, from what the list knows: its bridge was lost while
 * the session still runs. (A pending decision or a finished turn is in the session's state, which
 * the list does not carry.) Null: nothing waits on you.
 */
export function needsYou(s: SessionInfo): string | null {
  if (s.status === "ended") return null;
  if (s.state?.phase === "awaiting_permission") return "waiting for your decision";
  if (!s.bridge.online && s.bridge.since !== null) return "the agent's bridge was lost";
  return null;
}

/** Sessions that need a person first, then the most recently active. */
export function sortForList(sessions: SessionInfo[]): SessionInfo[] {
  const recent = (x: SessionInfo) => x.last_activity ?? x.created_at;
  return [...sessions].sort((x, y) => Number(needsYou(y) !== null) - Number(needsYou(x) !== null) || recent(y) - recent(x));
}

/** The page title and the app badge count the sessions that need a person. */
function countNeeds(n: number): void {
  document.title = n ? `(${n}) Mooring` : "Mooring";
  const nav = navigator as Navigator & { setAppBadge?: (n: number) => Promise<void>; clearAppBadge?: () => Promise<void> };
  if (n) nav.setAppBadge?.(n).catch(() => {});
  else nav.clearAppBadge?.().catch(() => {});
}

function card(s: SessionInfo): HTMLElement {
  const st = statusOf(s);
  const need = needsYou(s);
  const a = s.agent;
  const watchers = (s as SessionInfo & { watchers?: number }).watchers;
  return h(
    "a.session-card",
    { href: `#/s/${encodeURIComponent(s.id)}`, "data-session": s.id, "data-needs-you": need ? "true" : null, class: need ? "needs-you" : null },
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
  const body = h("div.list", { id: "sessions" });
  const note = h("div.banner", { id: "list-banner" });
  const who = h("span.muted.who", { id: "who" });
  const invites = invitations(() => void refresh());
  root.replaceChildren(
    h("header.top", null, h("div.row", null, h("h1.title", null, "Mooring"), h("div.spacer"), who, h("a.tb", { href: "#/machines", id: "machines-link" }, "Machines"), logoutButton(), themeButton())),
    note,
    h("main.list-main", null, notifySwitch(), sinksPanel(), invites.el, body),
  );
  api.me(true).then(
    (me) => {
      who.textContent = me.bootstrap ? "admin token" : me.name;
    },
    () => {},
  );
  let timer: ReturnType<typeof setTimeout> | null = null;
  let stopped = false;
  const refresh = async () => {
    if (timer) clearTimeout(timer);
    try {
      const [sessions] = await Promise.all([api.sessions(), invites.refresh()]);
      const sorted = sortForList(sessions);
      body.replaceChildren(...sorted.map(card));
      countNeeds(sorted.filter((x) => needsYou(x) !== null).length);
      if (!sessions.length) body.append(emptyState(location.origin));
      note.className = "banner";
      note.textContent = "";
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        // The login page is on its way (api.ts), and comes back here.
        return;
      } else {
        note.className = "banner bad";
        note.textContent = `Cannot reach moord (${(e as Error).message}); retrying.`;
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
