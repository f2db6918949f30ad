// Web client benchmark (run through scripts/bench-web): starts the real moord and moor (release
// builds), fills a session with 100,000 entries, then in Debian's Chromium at phone size measures
//  1. navigation → first live entry on screen when re-attaching to that session (median of 5,
//     with and without a cursor kept from an earlier visit), while a bridge adds 20 entries/s;
//  2. frame rate while 500 entries/s stream in (rAF frames counted for 25 s; also the longest
//     frame, and the page's entries at the end, past 10,000);
//  3. with a 10,000-entry window kept on the device (IndexedDB): reload while offline → the kept
//     transcript on screen (median of 5), and the bytes the page fetches re-attaching after a
//     minute away (20 entries/s meanwhile), against the entries missed and the whole log.
// Prints the figures. Every wait is a condition with a timeout.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium } from "playwright-core";

const ROOT = resolve(new URL("../..", import.meta.url).pathname);
const BIN = process.env.MOOR_BIN_DIR ?? join(ROOT, "target/release");
const N = Number(process.env.BENCH_ENTRIES ?? 100000);
const RUNS = 5;
const children = [];

const waitFor = async (what, ms, cond) => {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

function start(cmd, args, onLine) {
  const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "pipe"] });
  children.push(child);
  let buf = "";
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      onLine?.(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  });
  child.stderr.on("data", () => {});
  return child;
}

const dir = mkdtempSync(join(tmpdir(), "moor-web-bench-"));
let url = null;
start(join(BIN, "moord"), ["--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--keepalive-ms", "5000"], (l) => {
  const m = /listening on (http:\/\/\S+)/.exec(l);
  if (m) url = m[1];
});
try {
  await waitFor("moord", 30000, async () => url);
  const token = readFileSync(join(dir, "data/admin.token"), "utf8").trim();
  const api = async (p) => {
    const r = await fetch(`${url}/api/v1${p}`, { headers: { Authorization: `Bearer ${token}` } });
    if (!r.ok) throw new Error(`${p}: ${r.status}`);
    return r.json();
  };

  // --- 100,000 entries, then a slow live trickle on the same session
  // One agent: N lines at once, then one line every 50 ms (the session stays live).
  const t0 = Date.now();
  start(join(BIN, "moor"), [
    "run", "--server", url, "--token", token, "--session", "bench-big", "--state-dir", join(dir, "state-big"), "--",
    "bash", "-c", `seq 1 ${N}; while :; do echo live || exit; sleep 0.05; done`,
  ]);
  const big = await waitFor("the session", 30000, () => api("/sessions/bench-big"));
  await waitFor(`${N} entries`, 600000, async () => (await api(`/sessions/${big.id}`)).head_seq >= N + 5);
  console.log(`filled ${N.toLocaleString("en")} entries in ${((Date.now() - t0) / 1000).toFixed(1)} s; 20 more per second from now on`);

  const browser = await chromium.launch({
    executablePath: process.env.MOOR_CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
  const phone = () => browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });

  /** ms from navigation start to a row of an entry newer than the head at navigation on screen. */
  async function attach(page, keepCursor) {
    const head = (await api(`/sessions/${big.id}`)).head_seq;
    if (!page.url().startsWith(url)) await page.goto(`${url}/`);
    if (!keepCursor) await page.evaluate(() => localStorage.clear());
    await page.evaluate((t) => localStorage.setItem("moor.token", t), token);
    if (keepCursor) await page.evaluate(([id, c]) => localStorage.setItem(`moor.cursor.${id}`, String(c)), [big.id, head - 50]);
    // A fresh document each time (a hash-only change would not reload the page).
    await page.goto("about:blank");
    await page.goto(`${url}/#/s/${big.id}`, { waitUntil: "commit" });
    const handle = await page.waitForFunction(
      (h) => {
        const rows = document.querySelectorAll("#transcript .item[data-seq]");
        for (const r of rows) if (Number(r.getAttribute("data-seq")) > h) return performance.now();
        return 0;
      },
      head,
      { polling: "raf", timeout: 30000 },
    ).catch(async (e) => {
      const seen = await page.evaluate(() => ({ hi: window.__moor?.hi(), lo: window.__moor?.lo(), status: window.__moor?.status(), rows: window.__moor?.renderedSeqs().slice(-3), banners: [...document.querySelectorAll(".banner")].map((b) => b.textContent) }));
      throw new Error(`${e.message}: head ${head}, the page: ${JSON.stringify(seen)}`);
    });
    const t = await handle.jsonValue();
    marks.push(await page.evaluate(() => Object.fromEntries(performance.getEntriesByType("mark").map((m) => [m.name, Math.round(m.startTime)]))));
    return t;
  }
  const marks = [];

  const ctx = await phone();
  const page = await ctx.newPage();
  await page.goto(`${url}/`);
  await attach(page, false); // warm: the shell in the HTTP cache and the service worker
  for (const keep of [false, true]) {
    const times = [];
    for (let i = 0; i < RUNS; i++) times.push(await attach(page, keep));
    console.log(
      `  (page milestones in ms of the last run: ${JSON.stringify(marks[marks.length - 1])})\n` +
      `re-attach to ${N.toLocaleString("en")} entries, ${keep ? "cursor kept 50 entries behind" : "no cursor"}: navigation → first live entry on screen: median ${median(times).toFixed(0)} ms (runs: ${times.map((t) => t.toFixed(0)).join(", ")})`,
    );
  }
  await ctx.close();

  // --- a 10,000-entry window kept on the device: offline reload, and re-attach after a minute
  const offCtx = await phone();
  const op = await offCtx.newPage();
  await op.goto(`${url}/#token=${token}`);
  await op.goto(`${url}/#/s/${big.id}`);
  await op.waitForFunction(() => window.__moor && window.__moor.hi() > 0 && navigator.serviceWorker?.controller, null, { timeout: 60000 });
  for (let i = 0; i < 200 && (await op.evaluate(() => window.__moor.seqs().length)) < 10000; i++) await op.evaluate(() => window.__moor.loadOlder());
  await waitFor("10,000 entries kept on the device", 120000, async () => (await op.evaluate(() => window.__moor.keptCount())) >= 10000);
  const offline = [];
  let shownOffline = 0;
  for (let i = 0; i < RUNS; i++) {
    await offCtx.setOffline(true);
    await op.reload({ waitUntil: "commit" });
    const h = await op.waitForFunction(() => (document.querySelectorAll("#transcript .item[data-seq]").length ? performance.now() : 0), null, { polling: "raf", timeout: 30000 });
    offline.push(await h.jsonValue());
    shownOffline = await op.evaluate(() => window.__moor.seqs().length);
    await offCtx.setOffline(false);
    await waitFor("the stream back", 30000, () => op.evaluate(() => window.__moor.status().kind === "live"));
  }
  console.log(`reload while offline, ${shownOffline.toLocaleString("en")} entries kept on the device: navigation → transcript on screen: median ${median(offline).toFixed(0)} ms (runs: ${offline.map((t) => t.toFixed(0)).join(", ")})`);

  const cursor = await op.evaluate(() => window.__moor.hi());
  await op.goto("about:blank");
  const away = Date.now();
  // A minute away (the benchmark's subject, not a synchronisation), bounded.
  await new Promise((r) => setTimeout(r, 60000));
  const cdp = await offCtx.newCDPSession(op);
  await cdp.send("Network.enable");
  const apiReq = new Set();
  let bytes = 0;
  cdp.on("Network.requestWillBeSent", (e) => {
    if (new URL(e.request.url).pathname.startsWith("/api/")) apiReq.add(e.requestId);
  });
  cdp.on("Network.dataReceived", (e) => {
    if (apiReq.has(e.requestId)) bytes += e.encodedDataLength || e.dataLength;
  });
  const headBack = (await api(`/sessions/${big.id}`)).head_seq;
  await op.goto(`${url}/#/s/${big.id}`, { waitUntil: "commit" });
  await op.waitForFunction((h) => window.__moor && window.__moor.hi() >= h, headBack, { timeout: 60000 });
  const missed = headBack - cursor;
  const sample = await (await fetch(`${url}/api/v1/sessions/${big.id}/entries?after=0&limit=1000`, { headers: { Authorization: `Bearer ${token}` } })).text();
  const perEntry = sample.length / 1000;
  console.log(
    `re-attach after ${((Date.now() - away) / 1000).toFixed(0)} s away: ${missed} entries missed, ${(bytes / 1024).toFixed(1)} KiB fetched from /api/ (${(bytes / missed).toFixed(0)} B per missed entry; ` +
      `the whole log of ${headBack.toLocaleString("en")} entries is ~${((perEntry * headBack) / 1048576).toFixed(1)} MiB as history pages)`,
  );
  await offCtx.close();

  // --- 500 entries/s into an open page
  const rateCtx = await phone();
  const rp = await rateCtx.newPage();
  await rp.goto(`${url}/#token=${token}`);
  // Paced by the clock: line n is written at n × 2 ms, whatever the scheduling (500/s).
  start(join(BIN, "moor"), [
    "run", "--server", url, "--token", token, "--session", "bench-rate", "--state-dir", join(dir, "state-rate"), "--",
    "bash", "-c", "s=$(date +%s%N); n=0; while :; do t=$(( ($(date +%s%N) - s) / 2000000 )); if [ $t -gt $n ]; then seq $((n+1)) $t || exit; n=$t; fi; sleep 0.01; done",
  ]);
  const rate = await waitFor("the session", 30000, () => api("/sessions/bench-rate"));
  await rp.goto(`${url}/#/s/${rate.id}`);
  await rp.waitForFunction(() => window.__moor && window.__moor.hi() > 100, null, { timeout: 30000 });
  const h0 = (await api(`/sessions/${rate.id}`)).head_seq;
  const t1 = Date.now();
  const frames = await rp.evaluate(
    (ms) =>
      new Promise((done) => {
        const gaps = [];
        let last = performance.now();
        const end = last + ms;
        const tick = (now) => {
          gaps.push(now - last);
          last = now;
          if (now < end) requestAnimationFrame(tick);
          else done(gaps);
        };
        requestAnimationFrame(tick);
      }),
    25000,
  );
  const secs = (Date.now() - t1) / 1000;
  const produced = (await api(`/sessions/${rate.id}`)).head_seq - h0;
  const held = await rp.evaluate(() => window.__moor.seqs().length);
  const sorted = [...frames].sort((a, b) => a - b);
  console.log(
    `streaming ${(produced / secs).toFixed(0)} entries/s for ${secs.toFixed(0)} s: ${(frames.length / secs).toFixed(1)} frames/s, ` +
      `median frame ${median(frames).toFixed(1)} ms, p99 ${sorted[Math.floor(sorted.length * 0.99)].toFixed(1)} ms, longest ${sorted[sorted.length - 1].toFixed(1)} ms; page holds ${held} entries`,
  );
  await browser.close();
} finally {
  // SIGKILL leaves nothing to flush; the agents exit when their output pipe closes.
  for (const c of children) c.kill("SIGKILL");
}
