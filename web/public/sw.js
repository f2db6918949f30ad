// Mooring's service worker: caches the app shell (the page, its hashed assets, icons, manifest)
// so the client opens without a network. It never touches session data: /api/ and /app-config.json
// always go to the network, uncached.
const CACHE = "moor-shell-v1";
const SHELL = ["/", "/manifest.webmanifest", "/icons/icon-192.png", "/icons/icon.svg"];

self.addEventListener("install", (event) => {
  // The shell and the hashed assets the page names (so the next load works offline).
  event.waitUntil(
    caches
      .open(CACHE)
      .then(async (c) => {
        await c.addAll(SHELL);
        const page = await (await c.match("/")).text();
        const assets = [...page.matchAll(/\/assets\/[^"')\s]+/g)].map((m) => m[0]);
        await c.addAll([...new Set(assets)]);
      })
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  const url = new URL(req.url);
  if (req.method !== "GET" || url.origin !== self.location.origin) return;
  if (url.pathname.startsWith("/api/") || url.pathname === "/app-config.json" || url.pathname === "/healthz") return;
  if (req.mode === "navigate") {
    // The page: network first (a new build shows at once), the cached shell when offline.
    event.respondWith(
      fetch(req)
        .then((res) => {
          // Only the app's own page is the shell; any other page navigated to is not.
          if (res.ok && (url.pathname === "/" || url.pathname === "/index.html")) {
            const copy = res.clone();
            caches.open(CACHE).then((c) => c.put("/", copy));
          }
          return res;
        })
        .catch(() => caches.match("/").then((r) => r || Response.error())),
    );
    return;
  }
  if (url.pathname.startsWith("/assets/") || url.pathname.startsWith("/icons/") || url.pathname === "/manifest.webmanifest") {
    // Hashed assets never change: cache first, filled on first use.
    event.respondWith(
      caches.match(req).then(
        (hit) =>
          hit ||
          fetch(req).then((res) => {
            if (res.ok) {
              const copy = res.clone();
              caches.open(CACHE).then((c) => c.put(req, copy));
            }
            return res;
          }),
      ),
    );
  }
});

// Notifications (docs/notifications.md). A push carries a PushMessage: show it, or, with
// `close`, close the notification of the same tag (its request was answered elsewhere). In
// privacy mode (`private`) it carries ids only: the words come from moord, as the signed-in
// user, when it is shown.
self.addEventListener("push", (event) => {
  let m;
  try {
    m = event.data.json();
  } catch {
    return;
  }
  event.waitUntil(show(m));
});

async function show(m) {
  if (m.close) {
    for (const n of await self.registration.getNotifications({ tag: m.tag })) n.close();
    return;
  }
  const label = { approve: "Approve", deny: "Deny" };
  const text = m.private ? await privateText(m) : { title: m.title, body: m.body };
  // During the user's quiet hours (m.quiet) it is shown without sound or vibration.
  await self.registration.showNotification(text.title || "Mooring", {
    body: text.body,
    tag: m.tag,
    renotify: !m.quiet,
    silent: !!m.quiet,
    data: { ...m, title: text.title },
    actions: (m.actions || []).map((a) => ({ action: a, title: label[a] || a })),
  });
}

// The words of a privacy-mode notification; without them (offline, signed out) it says only
// that something happened.
async function privateText(m) {
  const url = `/api/v1/sessions/${encodeURIComponent(m.session)}/notification?seq=${m.seq}&count=${m.count || 1}`;
  try {
    const res = await fetch(url, { credentials: "same-origin" });
    if (res.ok) return await res.json();
  } catch {
    // fall through
  }
  return { title: "Mooring", body: "Open the session to see what happened." };
}

// Approve / Deny post `input.permission` with a fresh client_msg_id, as the signed-in user
// (the session cookie); the server refuses a decision for a request that is no longer pending.
// The outcome replaces the notification. A plain tap (or a platform without actions) opens the
// session.
self.addEventListener("notificationclick", (event) => {
  event.waitUntil(onNotificationClick(event.notification, event.action));
});

async function onNotificationClick(notification, action) {
  const m = notification.data || {};
  notification.close();
  if ((action === "approve" || action === "deny") && m.request_id) {
    await decide(m, action === "approve" ? "allow" : "deny");
  } else if (m.url) {
    await self.clients.openWindow(m.url);
  }
}

async function decide(m, decision) {
  const body = {
    client_msg_id: `notify-${self.crypto.randomUUID()}`,
    kind: "input.permission",
    payload: { request_id: m.request_id, decision },
  };
  let res = null;
  try {
    res = await fetch(`/api/v1/sessions/${encodeURIComponent(m.session)}/inputs`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch {
    res = null;
  }
  const ok = !!res && res.ok;
  await self.registration.showNotification(ok ? `${decision === "allow" ? "Approved" : "Denied"}: ${m.title}` : `Not sent: ${m.title}`, {
    body: ok ? "Sent to the agent." : res && res.status === 409 ? "This request is no longer pending." : "Open the session to decide.",
    tag: m.tag,
    data: { ...m, actions: [], request_id: ok ? null : m.request_id },
  });
}
