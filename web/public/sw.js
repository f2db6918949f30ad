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
