// The session list: what runs, where, whether its bridge is there, when it last did something.

import { api, ApiError } from "../api";
import { ago, clock, h, themeButton } from "../dom";
import type { SessionInfo } from "../protocol/SessionInfo";
import { notifySwitch } from "./notify";
import { invitations } from "./offers";

const REFRESH_MS = 5000;

function statusOf(s: SessionInfo): { cls: string; text: string } {
  if (s.status === "ended") return { cls: "muted", text: "ended" };
  if (s.bridge.online) return { cls: "ok", text: "live" };
  if (s.bridge.since === null) return { cls: "muted", text: "waiting for a bridge" };
  return { cls: "bad", text: `bridge offline since ${clock(s.bridge.since)}` };
}

function card(s: SessionInfo): HTMLElement {
  const st = statusOf(s);
  const a = s.agent;
  const watchers = (s as SessionInfo & { watchers?: number }).watchers;
  return h(
    "a.session-card",
    { href: `#/s/${encodeURIComponent(s.id)}`, "data-session": s.id },
    h("div.row", null, h("b.ell", null, s.name), h("div.spacer"), h(`span.pill.${st.cls}`, null, st.text)),
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
    h("header.top", null, h("div.row", null, h("h1.title", null, "Mooring"), h("div.spacer"), who, logoutButton(), themeButton())),
    note,
    h("main.list-main", null, notifySwitch(), invites.el, body),
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
      sessions.sort((x, y) => (y.last_activity ?? y.created_at) - (x.last_activity ?? x.created_at));
      body.replaceChildren(...sessions.map(card));
      if (!sessions.length) body.append(h("p.muted", null, "No sessions yet. Attach an agent: moor run -- <command>"));
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
