// Shared plumbing of the browser scenarios and the benchmark: Chromium, the moord API, bounded
// waits, and the line protocol to the Rust test that owns the processes (tests/tests/web.rs).

import { mkdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

export const URL_BASE = process.env.MOOR_URL ?? "http://127.0.0.1:7070";
export const TOKEN = process.env.MOOR_TOKEN ?? "";
/** A second server whose access tokens live MOOR_SHORT_TTL_SECS (tests/tests/web.rs). */
export const SHORT = { url: process.env.MOOR_SHORT_URL ?? "", token: process.env.MOOR_SHORT_TOKEN ?? "", ttlSecs: Number(process.env.MOOR_SHORT_TTL_SECS ?? 0) };
export const PASSWORD = "correct horse battery";
export const KEEPALIVE_MS = Number(process.env.MOOR_KEEPALIVE_MS ?? 15000);
/** The page's watchdog interval for this server (see src/stream.ts watchdogFor). */
export const WATCHDOG_MS = KEEPALIVE_MS * 2 + 1000;
export const ARTIFACTS = process.env.MOOR_ARTIFACTS ?? new URL("../artifacts", import.meta.url).pathname;

/** A screenshot of `page` as `$MOOR_ARTIFACTS/<name>.png`. */
export const shot = (page, name) => {
  mkdirSync(ARTIFACTS, { recursive: true });
  return page.screenshot({ path: `${ARTIFACTS}/${name}.png` });
};
export const PHONE = { width: 390, height: 844 };

/** Chromium; `bfcache: true` keeps the back/forward cache on (playwright turns it off). */
export async function launch({ bfcache = false } = {}) {
  return chromium.launch({
    executablePath: process.env.MOOR_CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    ignoreDefaultArgs: bfcache ? ["--disable-back-forward-cache"] : [],
  });
}

/** A phone-sized browser context. */
export async function phone(browser, opts = {}) {
  return browser.newContext({ viewport: PHONE, deviceScaleFactor: 2, isMobile: true, hasTouch: true, ...opts });
}

// ---- requests to the Rust side (tests/tests/web.rs)
const pending = new Map();
let nextId = 1;
let rl = null;
export function rpc(op, args = {}) {
  if (!rl) {
    rl = createInterface({ input: process.stdin });
    rl.on("line", (line) => {
      const msg = JSON.parse(line);
      const p = pending.get(msg.id);
      pending.delete(msg.id);
      if (!p) return;
      if (msg.ok) p.resolve(msg.result);
      else p.reject(new Error(`${op}: ${msg.error}`));
    });
  }
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    process.stdout.write(`@rpc ${JSON.stringify({ id, op, args })}\n`);
  });
}
export function closeRpc() {
  rl?.close();
}

// ---- the API, as a second opinion on what the page shows
export async function api(path, init = {}, base = URL_BASE, token = TOKEN) {
  const res = await fetch(`${base}/api/v1${path}`, {
    ...init,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", ...(init.headers ?? {}) },
  });
  if (!res.ok) throw Object.assign(new Error(`${path}: HTTP ${res.status}`), { status: res.status });
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** The API of the short-token server, as its admin. */
export const shortApi = (path, init = {}) => api(path, init, SHORT.url, SHORT.token);

/** Adds user `name` (password PASSWORD) as the admin of `base`. */
export async function addUser(name, base = URL_BASE, token = TOKEN) {
  await api("/users", { method: "POST", body: JSON.stringify({ name, password: PASSWORD }) }, base, token);
}

/** Gives `user` `role` on session `id`, as the admin of `base`. */
export async function share(id, user, role, base = URL_BASE, token = TOKEN) {
  await api(`/sessions/${id}/members/${user}`, { method: "PUT", body: JSON.stringify({ role }) }, base, token);
}

/** Logs a browser context in as `name` through the API (its cookies land in the context). */
export async function loginContext(ctx, name, base = URL_BASE) {
  const res = await ctx.request.post(`${base}/api/v1/auth/login`, { data: { name, password: PASSWORD } });
  if (!res.ok()) throw new Error(`login ${name}: HTTP ${res.status()}`);
}

/** Fills and submits the login page's form. */
export async function loginForm(page, name, password = PASSWORD) {
  await page.waitForSelector("#login-form", { timeout: 10000 });
  await page.fill("#login-name", name);
  await page.fill("#login-password", password);
  await page.click("#login-submit");
}

export async function allEntries(id, base = URL_BASE, token = TOKEN) {
  const out = [];
  let after = 0;
  for (let page = 0; page < 10000; page++) {
    const p = await api(`/sessions/${id}/entries?after=${after}&limit=1000`, {}, base, token);
    out.push(...p.entries);
    if (!p.has_more || !p.entries.length) break;
    after = p.entries[p.entries.length - 1].seq;
  }
  return out;
}

/** Re-checks `cond` every 50 ms until it returns a truthy value; fails naming `what` after `ms`. */
export async function waitFor(what, ms, cond) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? ` (last error: ${last.message})` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** `line-1` … `line-n`: what the test agent's `count n` prints. */
export const numbered = (n) => Array.from({ length: n }, (_, i) => `line-${i + 1}`);

export async function sessionByName(name, ms = 20000, base = URL_BASE, token = TOKEN) {
  return waitFor(`session ${name}`, ms, async () => {
    try {
      return await api(`/sessions/${encodeURIComponent(name)}`, {}, base, token);
    } catch (e) {
      if (e.status === 404) return null;
      throw e;
    }
  });
}

export function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`);
}

/** Opens the page with the token, then the session's view. */
export async function openSession(page, id) {
  await page.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
  await page.waitForFunction(() => window.__moor !== undefined);
}

export const banner = (page, which) => page.evaluate((w) => {
  const el = document.getElementById(`${w}-banner`);
  return el ? { state: el.dataset.state ?? "", text: el.textContent ?? "" } : { state: "", text: "" };
}, which);

/** Waits (up to `ms`) until the `which` banner ("stream" or "bridge") is in `state`; returns it. */
export const waitBanner = (page, which, state, ms) =>
  waitFor(`the ${which} banner to say ${state}`, ms, async () => {
    const b = await banner(page, which);
    return b.state === state ? b : null;
  });

/** Starts an agent printing `line-1..count`, one every `interval_ms`, for session `name`; its info. */
export async function linesSession(name, count, interval_ms) {
  await rpc("lines", { session: name, count, interval_ms });
  return sessionByName(name);
}

/** Opens session `id` on a new phone. */
export async function openOnPhone(browser, id) {
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, id);
  return { ctx, page };
}

/** Starts an echo agent for session `name` and opens it on a new phone once the agent is online. */
export async function echoSessionOnPhone(browser, name) {
  await rpc("echo", { session: name });
  const info = await sessionByName(name);
  const { ctx, page } = await openOnPhone(browser, info.id);
  await waitBanner(page, "bridge", "online", 20000);
  return { info, ctx, page };
}

/** Waits until the session ended on the server (asked through `call`) and the page (showing it) holds its head; returns the head. */
export async function untilEnded(page, id, call = api) {
  await waitFor(`session ${id} to end`, 120000, async () => (await call(`/sessions/${id}`)).status === "ended");
  // The head is read again on every check: an entry may still follow the end (the bridge's
  // disconnect), and the page must hold whatever the log holds.
  let h;
  await waitFor("the page to reach the head", 30000, async () => {
    h = (await call(`/sessions/${id}`)).head_seq;
    return page.evaluate(([id, h]) => window.__moor?.id === id && window.__moor.hi() === h, [id, h]);
  }).catch(async (e) => {
    const seen = await page.evaluate(() => ({ id: window.__moor?.id, hi: window.__moor?.hi(), status: window.__moor?.status(), banners: window.__banners, vis: document.visibilityState }));
    throw new Error(`${e.message}: head ${h}, the page: ${JSON.stringify(seen)}`);
  });
  return h;
}

/** Loads every older page into the view; returns the seqs and agent lines it then holds. */
export async function everything(page) {
  for (let i = 0; i < 10000; i++) {
    const more = await page.evaluate(() => window.__moor.hasOlder());
    if (!more) break;
    await page.evaluate(() => window.__moor.loadOlder());
  }
  return page.evaluate(() => ({ seqs: window.__moor.seqs(), lines: window.__moor.lines(), rendered: window.__moor.renderedSeqs() }));
}

/**
 * The server's log and the page's view of it, read while the log's head stood still: an ended
 * session can still gain an entry (its `session.ended`, the bridge's disconnect) between two
 * reads, and a comparison across that append proves nothing. Fails when the head keeps moving.
 */
async function settledSnapshot(page, id, base, token) {
  const head = async () => (await api(`/sessions/${id}`, {}, base, token)).head_seq;
  let last;
  for (let attempt = 0; attempt < 20; attempt++) {
    const h = await head();
    await waitFor(`the page to reach seq ${h}`, 30000, () => page.evaluate((h) => window.__moor.hi() >= h, h));
    const server = await allEntries(id, base, token);
    const shown = await everything(page);
    const after = await head();
    if (after === h && server.at(-1)?.seq === h) return { server, shown };
    last = `${h} then ${after}`;
  }
  throw new Error(`the log of ${id} kept growing while it was compared (head ${last})`);
}

/** The page ends holding exactly the server's log: every seq once, in order, nothing else. */
export async function assertExact(page, id, expectLines, base = URL_BASE, token = TOKEN) {
  const { server, shown } = await settledSnapshot(page, id, base, token);
  const want = server.map((e) => e.seq);
  assert(shown.seqs.length === want.length, `page holds ${shown.seqs.length} entries, server ${want.length}`);
  for (let i = 0; i < want.length; i++) assert(shown.seqs[i] === want[i], `entry ${i}: page seq ${shown.seqs[i]}, server seq ${want[i]}`);
  const serverLines = server.filter((e) => e.kind === "agent.output").map((e) => e.payload.text);
  assert(JSON.stringify(shown.lines) === JSON.stringify(serverLines), "agent lines differ from the server's");
  if (expectLines) {
    assert(serverLines.length === expectLines.length && serverLines.every((l, i) => l === expectLines[i]), "the server's lines are not the agent's");
  }
  // What is drawn is a contiguous, ordered run of rows, each once.
  const r = shown.rendered;
  assert(r.length > 0, "rows are drawn");
  for (let i = 1; i < r.length; i++) assert(r[i] > r[i - 1], `drawn rows out of order at ${i}: ${r[i - 1]} then ${r[i]}`);
}

/**
 * Runs `scenarios` ({name, fn}) one after another in `browser` — only those `only(name)` keeps,
 * when given — printing a line each and a summary, then exits: 1 when one failed or none ran
 * (a filter that matches nothing proves nothing).
 */
export async function runScenarios(label, scenarios, browser, only = null) {
  let passed = 0;
  let failed = 0;
  for (const s of scenarios) {
    if (only && !only(s.name)) continue;
    const t0 = Date.now();
    try {
      await s.fn({ browser });
      passed++;
      console.log(`ok   ${s.name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${s.name}: ${e.stack ?? e}`);
    }
  }
  await browser.close();
  closeRpc();
  console.log(`${label}: ${passed} passed, ${failed} failed`);
  process.exit(failed || passed === 0 ? 1 : 0);
}
