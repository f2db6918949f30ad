// Entry point: token capture, theme, the service worker, the outbox, and a two-route hash router
// (`#/` the session list, `#/s/<id>` a session).

import "./style.css";
import { api, appConfig, captureToken, type Role } from "./api";
import { applyTheme } from "./dom";
import { Outbox } from "./outbox";
import { listView } from "./views/list";
import { sessionView } from "./views/session";

async function main(): Promise<void> {
  captureToken();
  applyTheme();
  if ("serviceWorker" in navigator && window.isSecureContext) {
    navigator.serviceWorker.register("/sw.js").catch(() => {
      // The app works without it; it only makes the shell load offline.
    });
  }
  const root = document.getElementById("app") as HTMLElement;
  const [config, outbox, role] = await Promise.all([
    appConfig(),
    Outbox.open((session, req) => api.postInput(session, req)),
    api.role().catch((): Role => "admin"),
  ]);
  document.documentElement.dataset.role = role;
  window.addEventListener("online", () => outbox.pump());
  outbox.pump();

  let close: (() => void) | null = null;
  const route = () => {
    close?.();
    const path = location.hash.slice(1).split("&")[0];
    const m = /^\/s\/([^/]+)$/.exec(path);
    close = m
      ? sessionView(root, decodeURIComponent(m[1]), { outbox, role, keepaliveMs: config.keepalive_ms })
      : listView(root);
    window.scrollTo(0, 0);
  };
  window.addEventListener("hashchange", route);
  route();
}

void main();
