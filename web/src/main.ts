// Entry point: token capture, theme, the service worker, the outbox, and a hash router:
// `#/` the session list, `#/s/<id>` a session, `#/login`, `#/setup&code=…`, `#/device&code=…`
// (approving `moor login`), `#/join&link=…` (a share link), `#/machines` and `#/m/<id>` (machines
// running `moor host`).

import "./style.css";
import { api, appConfig, captureToken } from "./api";
import { watchNeeds } from "./attention";
import { applyTheme } from "./dom";
import type { StoredWindow } from "./cache";
import { Outbox } from "./outbox";
import type { SessionInfo } from "./protocol/SessionInfo";
import { deviceView, joinView, loginView, setupView } from "./views/access";
import { listView } from "./views/list";
import { machineView, machinesView } from "./views/machines";
import { keptTail, sessionView } from "./views/session";

/** The route of the fragment (`/s/<id>`, `/login`…) and its `&key=value` parameters. */
function parseHash(): { path: string; params: URLSearchParams } {
  const [path, ...rest] = location.hash.slice(1).split("&");
  return { path: path || "/", params: new URLSearchParams(rest.join("&")) };
}

async function main(): Promise<void> {
  performance.mark("moor:main");
  await captureToken();
  applyTheme();
  if ("serviceWorker" in navigator && window.isSecureContext) {
    navigator.serviceWorker.register("/sw.js").catch(() => {
      // The app works without it; it only makes the shell load offline.
    });
  }
  const root = document.getElementById("app") as HTMLElement;
  // Ask for the session the URL names while the rest boots.
  const sessionOf = (path: string) => /^\/s\/([^/]+)$/.exec(path);
  const m0 = sessionOf(parseHash().path);
  let early: Promise<SessionInfo | null> | undefined = m0 ? api.session(decodeURIComponent(m0[1])).catch(() => null) : undefined;
  // And what this device keeps of it (a reload offline draws from that).
  let kept: Promise<StoredWindow | null> | undefined = m0 ? keptTail(decodeURIComponent(m0[1])) : undefined;
  const [config, outbox] = await Promise.all([appConfig(), Outbox.open((session, req) => api.postInput(session, req))]);
  performance.mark("moor:boot");
  window.addEventListener("online", () => outbox.pump());
  outbox.pump();

  let close: (() => void) | null = null;
  // Views signed in to, other than the list (which counts itself), keep the title's and the
  // badge's count of sessions that need you current.
  const also = (a: () => void, b: () => void) => () => {
    a();
    b();
  };
  const route = () => {
    close?.();
    close = null;
    const { path, params } = parseHash();
    const m = sessionOf(path);
    if (m) close = also(sessionView(root, decodeURIComponent(m[1]), { outbox, keepaliveMs: config.keepalive_ms, early, kept }), watchNeeds());
    else if (path === "/login") loginView(root);
    else if (path === "/setup") setupView(root, params.get("code") ?? "");
    else if (path === "/device") deviceView(root, params.get("code") ?? "");
    else if (path === "/join") joinView(root, params.get("link") ?? "");
    else if (path === "/machines") close = also(machinesView(root), watchNeeds());
    else if (path.startsWith("/m/")) close = also(machineView(root, decodeURIComponent(path.slice(3))), watchNeeds());
    else close = listView(root);
    early = undefined;
    kept = undefined;
    window.scrollTo(0, 0);
  };
  window.addEventListener("hashchange", route);
  route();
}

void main();
