// Entry point: token capture, theme, the service worker, the outbox, and a two-route hash router
// (`#/` the session list, `#/s/<id>` a session).

import "./style.css";
import { api, appConfig, captureToken, type Role } from "./api";
import { applyTheme } from "./dom";
import { Outbox } from "./outbox";
import type { SessionInfo } from "./protocol/SessionInfo";
import { listView } from "./views/list";
import { sessionView } from "./views/session";

async function main(): Promise<void> {
  performance.mark("moor:main");
  captureToken();
  applyTheme();
  if ("serviceWorker" in navigator && window.isSecureContext) {
    navigator.serviceWorker.register("/sw.js").catch(() => {
      // The app works without it; it only makes the shell load offline.
    });
  }
  const root = document.getElementById("app") as HTMLElement;
  // Ask for the session the URL names while the rest boots.
  const routeOf = () => /^\/s\/([^/]+)$/.exec(location.hash.slice(1).split("&")[0]);
  const m0 = routeOf();
  let early: Promise<SessionInfo | null> | undefined = m0 ? api.session(decodeURIComponent(m0[1])).catch(() => null) : undefined;
  const [config, outbox, role] = await Promise.all([
    appConfig(),
    Outbox.open((session, req) => api.postInput(session, req)),
    api.role().catch((): Role => "admin"),
  ]);
  performance.mark("moor:boot");
  document.documentElement.dataset.role = role;
  window.addEventListener("online", () => outbox.pump());
  outbox.pump();

  let close: (() => void) | null = null;
  const route = () => {
    close?.();
    const m = routeOf();
    close = m
      ? sessionView(root, decodeURIComponent(m[1]), { outbox, role, keepaliveMs: config.keepalive_ms, early })
      : listView(root);
    early = undefined;
    window.scrollTo(0, 0);
  };
  window.addEventListener("hashchange", route);
  route();
}

void main();
