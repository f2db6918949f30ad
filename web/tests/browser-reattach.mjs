// Browser scenarios of re-attaching and of checkpoints: a real Chromium (Debian's, via
// playwright-core, with its back/forward cache on) against the real moord and moor, which
// tests/tests/web.rs starts and controls (`rpc`). Back/forward through the hash routes and
// through the back/forward cache, a discarded tab, a phone asleep (a frozen page), a stream
// stalled, reset and cut by a fault proxy, scrolling up a 10,000-entry transcript, and the
// checkpoints sheet with its diffs. Every wait is a condition with a timeout as a failure guard.
// Prints one line per scenario and "N passed, M failed"; screenshots go to $MOOR_ARTIFACTS.
// MOOR_SCENARIO=<part of a name> runs only the scenarios whose name contains it; MOOR_WEB_ONLY=<regex>
// those whose name matches it.

import {
  allEntries, api, assert, assertExact, banner, everything, launch, linesSession, numbered, phone, rpc, runScenarios,
  sessionByName, shot, TOKEN, untilEnded, URL_BASE, waitBanner, waitFor, WATCHDOG_MS,
} from "./lib.mjs";
import { rawChromium } from "./cdp.mjs";

const scenarios = [];
const scenario = (name, fn) => scenarios.push({ name, fn });

const head = async (id) => (await api(`/sessions/${id}`)).head_seq;
const cursorOf = (page, id) => page.evaluate((id) => Number(localStorage.getItem(`moor.cursor.${id}`) ?? 0), id);



/** A request for a session's stream (`events`) or history (`entries`), or null. */
function sessionRequest(url) {
  const u = new URL(url);
  const m = /^\/api\/v1\/sessions\/([^/]+)\/(events|entries)$/.exec(u.pathname);
  if (!m) return null;
  const num = (k) => (u.searchParams.has(k) ? Number(u.searchParams.get(k)) : null);
  return { session: decodeURIComponent(m[1]), what: m[2], after: num("after"), before: num("before"), limit: num("limit") };
}

/** Every request a playwright page makes for a session's stream or history. */
function recordRequests(page) {
  const log = [];
  page.on("request", (r) => {
    const req = sessionRequest(r.url());
    if (req) log.push(req);
  });
  return log;
}
/** The same for a page of the bare Chromium (cdp.mjs). */
const rawRequests = (page) => page.requests.map(sessionRequest).filter(Boolean);
const streams = (log, id) => log.filter((r) => r.session === id && r.what === "events");
const pages = (log, id) => log.filter((r) => r.session === id && r.what === "entries");

/** Keeps every state the stream banner takes, in order, in `window.__banners`, and the page's
 * lifecycle events; runs in every document. */
function bannerRecorder() {
  window.__banners = [];
  const note = (el) => {
    const last = window.__banners[window.__banners.length - 1];
    const state = el.dataset.state ?? "";
    if (!last || last.state !== state) window.__banners.push({ state, text: el.textContent ?? "", t: Date.now() });
    else last.text = el.textContent ?? "";
  };
  new MutationObserver((records) => {
    for (const r of records) if (r.target.id === "stream-banner") note(r.target);
  }).observe(document, { subtree: true, attributes: true, attributeFilter: ["data-state", "class"] });
  window.__lifecycle = [];
  for (const ev of ["freeze", "resume", "visibilitychange"]) {
    document.addEventListener(ev, () => window.__lifecycle.push({ ev, visibility: document.visibilityState, t: Date.now() }));
  }
  addEventListener("pageshow", (e) => {
    window.__pageshows = (window.__pageshows ?? []).concat(e.persisted);
  });
}
const recordBanners = (ctx) => ctx.addInitScript(bannerRecorder);
const banners = (page) => page.evaluate(() => window.__banners);

/** Waits until the view of session `id` shows entries above `seq`. */
const viewPast = (page, id, seq, ms = 30000) =>
  waitFor(`the view of ${id} past seq ${seq}`, ms, () => page.evaluate(([id, s]) => window.__moor?.id === id && window.__moor.hi() > s, [id, seq]));

/** Waits until the router shows session `id` (or the list, for null). */
const routedTo = (page, id) =>
  waitFor(`the view of ${id ?? "the list"}`, 10000, () =>
    page.evaluate((id) => (id === null ? !!document.getElementById("sessions") : window.__moor?.id === id && !!document.getElementById("stream-banner")), id),
  );

/** Checks that the view of `id` (re)opened with its stream resuming right after `cursor`. */
async function resumedFrom(page, log, id, before, cursor, what) {
  const opened = await waitFor(`${what}: a stream request`, 10000, () => (streams(log, id).length > before ? streams(log, id)[before] : null));
  assert(cursor > 0, `${what}: a cursor was kept for the session`);
  assert(opened.after === cursor, `${what}: the stream resumed after ${opened.after}, the last seq seen was ${cursor}`);
  await viewPast(page, id, cursor + 20);
}

scenario("back and forward between the list and two streaming sessions: each resumes from its own last seq, also from the back/forward cache", async ({ browser }) => {
  await rpc("lines", { session: "ra-nav-a", count: 3000, interval_ms: 8 });
  await rpc("lines", { session: "ra-nav-b", count: 3000, interval_ms: 8 });
  const a = (await sessionByName("ra-nav-a")).id;
  const b = (await sessionByName("ra-nav-b")).id;
  const ctx = await phone(browser);
  await recordBanners(ctx);
  const page = await ctx.newPage();
  const log = recordRequests(page);
  await page.goto(`${URL_BASE}/#token=${TOKEN}`);

  // list → A → B (a link and a route change, as a user would)
  await page.click(`.session-card[data-session="${a}"]`);
  await viewPast(page, a, 100);
  await page.evaluate((b) => (location.hash = `#/s/${b}`), b);
  await routedTo(page, b);
  const a1 = await cursorOf(page, a);
  await viewPast(page, b, 100);
  // back → A
  let n = streams(log, a).length;
  await page.goBack();
  await routedTo(page, a);
  const b1 = await cursorOf(page, b);
  await resumedFrom(page, log, a, n, a1, "back to A");
  // forward → B
  n = streams(log, b).length;
  await page.goForward();
  await routedTo(page, b);
  const a2 = await cursorOf(page, a);
  await resumedFrom(page, log, b, n, b1, "forward to B");
  // back → A, back → the list, forward → A
  n = streams(log, a).length;
  await page.goBack();
  await routedTo(page, a);
  await resumedFrom(page, log, a, n, a2, "back to A again");
  await page.goBack();
  await routedTo(page, null);
  const a3 = await cursorOf(page, a);
  n = streams(log, a).length;
  await page.goForward();
  await routedTo(page, a);
  await resumedFrom(page, log, a, n, a3, "forward from the list to A");
  // No view ever fetched a log from its start: history came a page at a time, below the cursor.
  for (const id of [a, b]) {
    assert(!streams(log, id).some((r) => r.after === 0), "no stream from seq 0");
    assert(pages(log, id).every((r) => r.before !== null && r.limit <= 200), `history only in pages below the cursor: ${JSON.stringify(pages(log, id))}`);
  }

  // A real navigation away (another page of the same origin) and back: the back/forward cache.
  await page.evaluate(() => (window.__sameDocument = true));
  n = streams(log, a).length;
  const mark = await banners(page);
  await page.goto(`${URL_BASE}/healthz`);
  const a4 = await cursorOf(page, a);
  assert(a4 > a3, `the cursor was kept when the page was hidden (${a4} after ${a3})`);
  await waitFor("entries written while the page is away", 30000, async () => (await head(a)) > a4 + 40);
  // A page restored from the cache fires no load event: wait for the commit only.
  await page.goBack({ waitUntil: "commit" });
  await waitFor("the page back", 10000, () => page.evaluate(() => window.__moor !== undefined));
  const same = await page.evaluate(() => ({ same: window.__sameDocument === true, shows: window.__pageshows }));
  assert(same.same && same.shows[same.shows.length - 1] === true, `restored from the back/forward cache (pageshow persisted), not reloaded: ${JSON.stringify(same)}`);
  await resumedFrom(page, log, a, n, a4, "back from another page");
  const back = await waitBanner(page, "stream", "back", 20000);
  const k = Number(/Back: (\d+) missed/.exec(back.text)?.[1] ?? -1);
  assert(k >= 40, `k missed entries replayed after the back/forward cache: ${back.text}`);
  const after = (await banners(page)).slice(mark.length).map((x) => x.state);
  assert(after[0] === "reconnecting", `the banner said reconnecting first when the page came back: ${after}`);
  await shot(page, "reattach-bfcache-back");

  await untilEnded(page, a);
  await assertExact(page, a, numbered(3000));
  await page.evaluate((b) => (location.hash = `#/s/${b}`), b);
  await untilEnded(page, b);
  await assertExact(page, b, numbered(3000));
  await ctx.close();
});

scenario("a discarded tab (hidden, frozen, its renderer gone) reopens from its stored seq: no gap, no duplicate, no full download", async () => {
  const { id } = await linesSession("ra-discard", 2000, 8);
  const chromium = await rawChromium();
  try {
    const first = await chromium.newPage(bannerRecorder);
    await first.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
    // Shown means saved: whenever the page holds an entry (in one task, with no event run in
    // between), its stored cursor is already that entry's seq. Sampled while the agent prints.
    let hiAtFreeze = 0;
    for (let i = 0; i < 8; i++) {
      await viewPast(first, id, Math.max(400, hiAtFreeze));
      const held = await first.evaluate((id) => ({ hi: window.__moor.hi(), stored: Number(localStorage.getItem(`moor.cursor.${id}`)) }), id);
      assert(held.stored === held.hi, `the page holds entries up to ${held.hi}, its stored cursor says ${held.stored}`);
      hiAtFreeze = held.hi;
    }
    // What Chromium does to a background tab it discards: hide and freeze it, then drop it
    // without running it again (no pagehide, no unload). Nothing the page saves depends on
    // these last events running.
    await first.freeze();
    await first.discard();
    // The same browser profile (storage survives), the same URL, after the agent wrote more.
    const page = await chromium.newPage(bannerRecorder);
    await page.goto(`${URL_BASE}/healthz`);
    const stored = await cursorOf(page, id);
    assert(stored >= hiAtFreeze, `the frozen page kept its cursor (${stored}, it held ${hiAtFreeze} just before)`);
    await waitFor("entries written while the tab is gone", 30000, async () => (await head(id)) > stored + 100);
    const before = page.requests.length;
    await page.goto(`${URL_BASE}/#/s/${id}`);
    const log = { get all() { return rawRequests({ requests: page.requests.slice(before) }); } };
    const opened = await waitFor("a stream request", 10000, () => streams(log.all, id)[0]);
    assert(opened.after === stored, `the reopened tab resumed after ${opened.after}, its stored seq is ${stored}`);
    await viewPast(page, id, stored + 20);
    // The history below the cursor comes from the window the page kept (IndexedDB), or, when the
    // tab was dropped before that was saved, as one page fetched right below the cursor.
    const firstPages = pages(log.all, id);
    assert(firstPages.length <= 1, `at most one page of history: ${JSON.stringify(firstPages)}`);
    if (firstPages.length === 1) {
      assert(firstPages[0].before === stored + 1 && firstPages[0].limit <= 200, `one page of history right below the cursor: ${JSON.stringify(firstPages)}`);
      const fetched = await waitFor("that page", 10000, () => (page.responses.length ? page.responses.flatMap((r) => r.json.entries.map((e) => e.seq)) : null));
      assert(fetched.length <= 200 && fetched.every((s) => s <= stored), `history fetched: ${fetched.length} entries up to ${Math.max(...fetched)}`);
    }
    await untilEnded(page, id);
    // Its view: history up to the cursor, then everything after it, contiguous, from one stream.
    const seqs = await page.evaluate(() => window.__moor.seqs());
    assert(seqs[0] <= stored - 199 + (firstPages.length ? 0 : 199) && seqs[0] <= stored && seqs.every((s, i) => s === seqs[0] + i), `contiguous through the cursor ${stored}: ${seqs[0]}..${seqs[seqs.length - 1]}`);
    assert(streams(log.all, id).length === 1, `one stream request (${streams(log.all, id).length})`);
    await shot(page, "reattach-discarded-tab");
    await assertExact(page, id, numbered(2000));
  } finally {
    await chromium.close();
  }
});

scenario("a phone asleep (page frozen) past the watchdog interval: reconnecting at once on waking, then 'back, k missed', complete", async () => {
  const { id } = await linesSession("ra-sleep", 1500, 10);
  const chromium = await rawChromium();
  try {
    const page = await chromium.newPage(bannerRecorder);
    await page.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
    await waitBanner(page, "stream", "live", 20000);
    await viewPast(page, id, 100);
    const mark = (await banners(page)).length;
    const hiBefore = await page.evaluate(() => window.__moor.hi());
    const requestsBefore = page.requests.length;
    await page.freeze();
    const t0 = Date.now();
    // Asleep for longer than the watchdog interval while the agent keeps printing.
    await waitFor("a long sleep with entries written", 60000, async () => Date.now() - t0 > WATCHDOG_MS + 1000 && (await head(id)) > hiBefore + 100);
    const headAtWake = await head(id);
    await page.wake();
    const woke = Date.now();
    const life = await page.evaluate(() => window.__lifecycle.map((l) => l.ev));
    assert(life.includes("freeze") && life.includes("resume"), `the page was frozen and resumed: ${life}`);
    const firstAfter = await waitFor("the banner to leave live", 10000, async () => (await banners(page)).slice(mark)[0]);
    assert(firstAfter.state === "reconnecting" || firstAfter.state === "catching-up", `after waking: ${JSON.stringify(firstAfter)}`);
    assert(firstAfter.t - woke < WATCHDOG_MS, `the page saw the sleep at once (${firstAfter.t - woke} ms), not a watchdog interval later`);
    if (firstAfter.state === "reconnecting") assert(/asleep/.test(firstAfter.text), `says why: ${firstAfter.text}`);
    const back = await waitBanner(page, "stream", "back", 20000);
    const reopened = streams(rawRequests({ requests: page.requests.slice(requestsBefore) }), id)[0];
    assert(reopened && reopened.after >= hiBefore && reopened.after < headAtWake - 50, `the stream resumed from the page's cursor (${reopened?.after}), not the head (${headAtWake})`);
    const k = Number(/Back: (\d+) missed/.exec(back.text)?.[1] ?? -1);
    assert(k >= headAtWake - reopened.after, `k missed entries (${back.text}) covers the sleep (${headAtWake - reopened.after})`);
    const states = (await banners(page)).slice(mark).map((x) => x.state);
    assert(!states.slice(0, states.indexOf("back")).includes("live"), `not live before back: ${states}`);
    await shot(page, "reattach-after-sleep");
    await untilEnded(page, id);
    await assertExact(page, id, numbered(1500));
  } finally {
    await chromium.close();
  }
});

scenario("a stream through a fault proxy: half-open (stalled) caught by the watchdog, reset and cut mid-stream; complete", async ({ browser }) => {
  const { url } = await rpc("proxy");
  const { id } = await linesSession("ra-proxy", 3000, 8);
  const ctx = await phone(browser);
  await recordBanners(ctx);
  const page = await ctx.newPage();
  await page.goto(`${url}/#/s/${id}&token=${TOKEN}`);
  await waitBanner(page, "stream", "live", 20000);
  await viewPast(page, id, 100);

  // Reset (RST) and cut (FIN) at growing points of the stream.
  for (const [i, op] of ["proxy_reset", "proxy_cut", "proxy_reset", "proxy_cut"].entries()) {
    const hi = await page.evaluate(() => window.__moor.hi());
    await viewPast(page, id, hi + 100);
    const mark = (await banners(page)).length;
    const { connections } = await rpc(op);
    assert(connections > 0, `${op} ${i}: there was a connection to break`);
    await waitFor(`${op} ${i}: reconnecting`, 10000, async () => (await banners(page)).slice(mark).some((b) => b.state === "reconnecting"));
    await waitFor(`${op} ${i}: back`, 20000, async () => (await banner(page, "stream")).state === "back");
  }

  // Half-open: the socket stays up, nothing comes. Only the watchdog can tell.
  await viewPast(page, id, (await page.evaluate(() => window.__moor.hi())) + 100);
  const t0 = Date.now();
  await rpc("proxy_stall");
  const down = await waitBanner(page, "stream", "reconnecting", WATCHDOG_MS + 3000);
  assert(Date.now() - t0 <= WATCHDOG_MS + 2000, `a stalled stream reported after ${Date.now() - t0} ms (watchdog ${WATCHDOG_MS} ms)`);
  assert(/no data for/.test(down.text), `says why: ${down.text}`);
  // Every pooled connection to the proxy is stalled too: each attempt that picks one fails by
  // the watchdog, until the browser opens fresh ones.
  await waitBanner(page, "stream", "back", 60000);
  console.log(`     back ${Date.now() - t0} ms after the stall`);
  await untilEnded(page, id);
  await assertExact(page, id, numbered(3000));
  await ctx.close();
});

scenario("scrolling up a 10,500-entry transcript pages older entries in: no duplicate, no hole, few rows in the DOM", async ({ browser }) => {
  const total = 10500;
  const { id } = await linesSession("ra-long", total, 0);
  // Ended, and its bridge shown offline: moord shows it so only once the bridge's disconnect is
  // in the log, the last entry an ended session gets, so the head read next stays the head.
  await waitFor("the agent to finish and its bridge to leave", 120000, async () => {
    const s = await api(`/sessions/${id}`);
    return s.status === "ended" && !s.bridge.online;
  });
  const h = await head(id);
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  const log = recordRequests(page);
  const fetched = [];
  page.on("response", async (r) => {
    if (/\/api\/v1\/sessions\/[^/]+\/entries\?/.test(r.url())) {
      const u = new URL(r.url());
      fetched.push({ before: Number(u.searchParams.get("before")), seqs: (await r.json()).entries.map((e) => e.seq) });
    }
  });
  await page.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
  await waitFor("the view at the head", 20000, () => page.evaluate((h) => window.__moor?.hi() === h, h)).catch(async (e) => {
    const seen = await page.evaluate(() => ({ hi: window.__moor?.hi(), lo: window.__moor?.lo(), status: window.__moor?.status(), banners: window.__banners }));
    throw new Error(`${e.message}: head ${h}, the page: ${JSON.stringify(seen)}`);
  });
  const box = await page.locator("#transcript").boundingBox();
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
  // What the reader sees: sampled only when no render is pending (between a prepend and the
  // next frame the rows are not placed yet, and nothing is painted).
  const view = () =>
    page.evaluate(async () => {
      for (let frames = 0; window.__moor.rendering(); frames++) {
        if (frames > 600) throw new Error("a render stayed pending for 600 frames");
        await new Promise((r) => requestAnimationFrame(r));
      }
      const sc = document.getElementById("transcript");
      const rows = [...sc.querySelectorAll(".item[data-seq]")];
      const seqs = window.__moor.renderedSeqs();
      const top = sc.getBoundingClientRect().top;
      const visible = rows.filter((el) => el.getBoundingClientRect().bottom > top).map((el) => Number(el.dataset.seq));
      return { lo: window.__moor.lo(), older: window.__moor.hasOlder(), seqs, rows: rows.length, topVisible: Math.min(...visible), scrollTop: sc.scrollTop };
    });
  const frames = await page.evaluateHandle(() => {
    const f = { last: performance.now(), gaps: [] };
    const tick = (t) => {
      f.gaps.push(t - f.last);
      f.last = t;
      if (!f.done) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    return f;
  });
  // The window opens empty at the head and pages the history below it in: measure from the
  // first rows drawn (on a loaded machine that page may still be on its way here).
  let v = await waitFor("the first rows drawn", 20000, async () => {
    const first = await view();
    return first.rows > 0 ? first : null;
  });
  let wheels = 0;
  let maxRows = 0;
  // Scroll up with the wheel, a screen or two at a time, as a reader would, to the first entry.
  while (v.older || v.scrollTop > 0) {
    assert(wheels++ < 2000, `still not at the top after ${wheels} wheel turns (lo ${v.lo})`);
    const prev = v;
    await page.mouse.wheel(0, -1200);
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
    v = await view();
    maxRows = Math.max(maxRows, v.rows);
    const s = v.seqs;
    assert(s.length > 0, "rows are drawn while scrolling");
    for (let i = 1; i < s.length; i++) assert(s[i] === s[i - 1] + 1, `drawn rows not contiguous at turn ${wheels}: ${s[i - 1]} then ${s[i]}`);
    // The reader's place is kept when a page is prepended: one turn moves ~55 rows of 22 px.
    const moved = prev.topVisible - v.topVisible;
    if (!(moved >= 0 && moved <= 120)) console.log(JSON.stringify({ prev: { ...prev, seqs: prev.seqs.length }, v: { ...v, seqs: [v.seqs[0], v.seqs[v.seqs.length - 1]] } }));
    assert(moved >= 0 && moved <= 120, `turn ${wheels}: the top row went from ${prev.topVisible} to ${v.topVisible}`);
  }
  const gaps = await frames.evaluate((f) => {
    f.done = true;
    return f.gaps.slice(1).sort((x, y) => x - y);
  });
  assert(v.lo === 1 && v.seqs[0] === 1, `reached the first entry (lo ${v.lo}, first row ${v.seqs[0]})`);
  assert(maxRows <= 150, `virtual list: at most ${maxRows} rows in the DOM for ${h} entries`);
  // What was fetched: pages of 200 walking down from the head, each right below the last.
  const reqs = pages(log, id);
  assert(reqs.length === Math.ceil(h / 200), `${reqs.length} history requests for ${h} entries`);
  await waitFor("every page's response", 10000, () => fetched.length === reqs.length);
  fetched.sort((x, y) => y.before - x.before);
  let expect = h + 1;
  for (const f of fetched) {
    assert(f.before === expect, `page asked before ${f.before}, expected ${expect}`);
    assert(f.seqs.length && f.seqs.every((s, i) => s === f.before - f.seqs.length + i), `page before ${f.before} is contiguous and ends right below it`);
    expect = f.seqs[0];
  }
  assert(expect === 1, `the pages cover the whole log down to seq 1 (stopped at ${expect})`);
  assert(streams(log, id).length === 1 && streams(log, id)[0].after === h, "one stream, from the head");
  const q = (p) => gaps[Math.min(gaps.length - 1, Math.floor(p * gaps.length))].toFixed(1);
  console.log(`     ${wheels} wheel turns, ${reqs.length} pages; frames: median ${q(0.5)} ms, p95 ${q(0.95)} ms, max ${q(1)} ms; at most ${maxRows} rows in the DOM`);
  await shot(page, "reattach-long-top");
  await assertExact(page, id, numbered(total));
  await ctx.close();
});

// A phone on a shell `name` whose bridge checkpoints (the harness's `checkpoints` session), once
// the bridge is online: the session's id, the phone's context and page, `send` (types a command
// in the composer and sends it) and `listed` (the server's checkpoints of the session).
async function checkpointingShell(browser, name) {
  await rpc("checkpoints", { session: name });
  const id = (await sessionByName(name)).id;
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
  await waitBanner(page, "bridge", "online", 20000);
  const send = async (cmd) => {
    await page.fill("#composer-text", cmd);
    await page.click("#composer button.send");
  };
  const listed = () => api(`/sessions/${id}/checkpoints`);
  return { id, ctx, page, send, listed };
}
// Whether the checkpoint `c` changed every one of `paths`.
const hasFiles = (c, ...paths) => paths.every((p) => c.files.some((f) => f.path === p));
// The checkpoint ids the sheet of `page` lists, in order.
const sheetCheckpoints = (page) =>
  page.evaluate(() => [...document.querySelectorAll(".panel.checkpoints [data-checkpoint-id]")].map((el) => el.dataset.checkpointId));

scenario("checkpoints: the sheet lists the server's checkpoints and opening one shows its diff", async ({ browser }) => {
  const { id, ctx, page, send, listed } = await checkpointingShell(browser, "ra-ckpt");
  await send("printf 'hello from the phone\\n' > notes.txt && echo 'more docs' >> README.md");
  await waitFor("a first checkpoint", 30000, async () => (await listed()).some((c) => hasFiles(c, "notes.txt", "README.md")));
  await send("rm gone.txt && sed -i 's/hello/goodbye/' src/main.rs");
  const newest = await waitFor("a checkpoint of the second change", 30000, async () => {
    const l = await listed();
    return l.length >= 2 && hasFiles(l[0], "gone.txt", "src/main.rs", "notes.txt") ? l : null;
  });
  await page.click("#checkpoints-btn");
  const ids = await waitFor("the checkpoints in the sheet", 10000, async () => {
    const got = await sheetCheckpoints(page);
    return got.length >= newest.length ? got : null;
  });
  const server = await listed();
  assert(JSON.stringify(ids) === JSON.stringify(server.map((c) => c.id)), `the sheet lists the server's checkpoints, newest first: ${ids} vs ${server.map((c) => c.id)}`);
  await shot(page, "sheet-checkpoints");
  const first = page.locator(`[data-checkpoint-id="${ids[0]}"]`);
  await first.locator("button.show-diff").click();
  await first.locator(".diff-slot pre.diff").waitFor({ timeout: 10000 });
  const shown = await first.locator(".diff-slot pre.diff").evaluate((pre) => ({
    text: pre.textContent,
    add: [...pre.querySelectorAll("span.add")].map((s) => s.textContent.replace(/\n$/, "")),
    del: [...pre.querySelectorAll("span.del")].map((s) => s.textContent.replace(/\n$/, "")),
  }));
  const res = await fetch(`${URL_BASE}/api/v1/checkpoints/${ids[0]}/diff`, { headers: { Authorization: `Bearer ${TOKEN}` } });
  const patch = await res.text();
  assert(shown.text === patch.split("\n").map((l) => `${l}\n`).join(""), "the view shows the server's patch, line for line");
  for (const l of ["+hello from the phone", "+more docs", '+    println!("goodbye");']) assert(shown.add.includes(l), `added line ${l} marked: ${shown.add}`);
  for (const l of ["-to be deleted", '-    println!("hello");']) assert(shown.del.includes(l), `removed line ${l} marked: ${shown.del}`);
  assert(/deleted file mode/.test(shown.text), "the deletion is shown");
  await first.scrollIntoViewIfNeeded();
  await shot(page, "sheet-checkpoint-diff");
  // The older checkpoint's diff holds the first change only.
  const second = page.locator(`[data-checkpoint-id="${ids[1]}"]`);
  await second.locator("button.show-diff").click();
  const older = await second.locator(".diff-slot pre.diff").evaluate((pre) => pre.textContent, null, { timeout: 10000 });
  assert(older.includes("+more docs") && !older.includes("goodbye"), "the older checkpoint shows its own diff");
  await page.click(".sheet-head button");

  // Later, a page that holds none of the log's checkpoint entries (they are older than the
  // history it loaded) still lists every checkpoint: the sheet asks the server.
  await send("seq 1 400");
  await waitFor("the agent's 400 lines", 30000, async () => (await allEntries(id)).some((e) => e.kind === "agent.output" && e.payload.text === "done 3"));
  const announced = (await allEntries(id)).filter((e) => e.kind === "checkpoint.created").map((e) => e.seq);
  const later = await phone(browser);
  const fresh = await later.newPage();
  await fresh.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
  await waitFor("the fresh page at the head", 20000, async () => fresh.evaluate((h) => window.__moor?.hi() >= h, await head(id)));
  const lo = await fresh.evaluate(() => window.__moor.lo());
  assert(announced.length >= 2 && announced.every((s) => s < lo), `the fresh page holds no checkpoint entry (they are at ${announced}, it starts at ${lo})`);
  await fresh.click("#checkpoints-btn");
  const freshIds = await waitFor("the checkpoints in the fresh page's sheet", 10000, async () => {
    const got = await sheetCheckpoints(fresh);
    return got.length ? got : null;
  });
  const now = (await listed()).map((c) => c.id);
  assert(JSON.stringify(freshIds) === JSON.stringify(now), `every checkpoint listed: ${freshIds} vs ${now}`);
  await later.close();
  await send("exit 0");
  await ctx.close();
});

scenario("review on the phone: a turn that edits three files (one large, one binary) shows each file's diff, the large one paged, the binary one named", async ({ browser }) => {
  const { id, ctx, page, send, listed } = await checkpointingShell(browser, "ra-review");
  // A first turn, checkpointed before the second starts: the second's review leaves it out.
  await send("echo 'first turn' >> README.md");
  await waitFor("the first turn's checkpoint", 30000, async () => (await listed()).some((c) => hasFiles(c, "README.md")));
  await send("sed -i 's/hello/review/' src/main.rs && seq 1 5000 | sed 's/^/big line /' > big.txt && printf '\\x00\\x01\\x02PNG' > logo.png");
  await waitFor("the second turn's checkpoint", 30000, async () => (await listed()).some((c) => hasFiles(c, "README.md", "src/main.rs", "big.txt", "logo.png")));
  const prompts = await waitFor("both prompts in the transcript", 20000, () =>
    page.evaluate(() => {
      const seqs = [...document.querySelectorAll("[data-input-seq]")].map((el) => Number(el.dataset.inputSeq));
      return seqs.length >= 2 ? seqs.sort((a, b) => a - b) : null;
    }),
  );
  const linkOf = (seq) => page.locator(`[data-input-seq="${prompts[seq]}"] .review-link`);
  await waitFor("the second turn's link counting its files", 20000, async () => ((await linkOf(1).textContent().catch(() => "")) === "3 files changed" ? true : null));
  const firstLink = await waitFor("the first turn's link", 20000, async () => ((await linkOf(0).textContent().catch(() => "")) === "1 file changed" ? true : null));
  assert(firstLink, "the first turn changed one file");
  await shot(page, "review-turn-link");

  // act: open the second turn's review
  await linkOf(1).click();
  const files = page.locator(".panel.review .review-file");
  await files.first().waitFor({ timeout: 10000 });
  const paths = await files.evaluateAll((els) => els.map((el) => `${el.dataset.path}:${el.dataset.status}`));
  assert(JSON.stringify(paths) === JSON.stringify(["big.txt:added", "logo.png:added", "src/main.rs:modified"]), `the turn's three files: ${paths}`);
  const collapsed = await page.locator(".panel.review .review-body").evaluateAll((els) => els.every((el) => el.hidden));
  assert(collapsed, "every file starts collapsed");
  await shot(page, "review-collapsed");

  // The small file: its exact lines, highlighted.
  const small = page.locator('.review-file[data-path="src/main.rs"]');
  await small.locator(".review-file-head").click();
  const lines = await small.locator("pre.diff").evaluate((pre) => ({
    all: [...pre.children].map((s) => `${s.className}|${s.textContent.replace(/\n$/, "")}`),
    kw: [...pre.querySelectorAll(".tk-kw")].map((b) => b.textContent),
    str: [...pre.querySelectorAll(".tk-str")].map((b) => b.textContent),
  }));
  const want = ["hunk|@@ -1,3 +1,3 @@", "ctx| fn main() {", 'del|-    println!("hello");', 'add|+    println!("review");', "ctx| }"];
  assert(JSON.stringify(lines.all) === JSON.stringify(want), `the small file's diff, line for line: ${JSON.stringify(lines.all)}`);
  assert(lines.kw.includes("fn") && lines.str.includes('"review"'), `keywords and strings highlighted: ${lines.kw} / ${lines.str}`);
  await shot(page, "review-small");

  // The binary file: named, not shown.
  const bin = page.locator('.review-file[data-path="logo.png"]');
  await bin.locator(".review-file-head").click();
  const binText = await bin.locator(".review-body").textContent();
  assert(binText === "binary file, not shown" && (await bin.locator("pre").count()) === 0, `the binary file is named only: ${binText}`);

  // The large file: a first page, then "more" until all 5,000 lines are there.
  const big = page.locator('.review-file[data-path="big.txt"]');
  await big.locator(".review-file-head").click();
  const adds = () => big.locator("pre.diff span.add").count();
  const firstPage = await adds();
  assert(firstPage > 0 && firstPage < 5000, `the large file's diff comes in pages: ${firstPage} lines first`);
  await shot(page, "review-large-first-page");
  let clicks = 0;
  while ((await big.locator("button.review-more").count()) > 0) {
    const before = await adds();
    await big.locator("button.review-more").click();
    clicks++;
    await waitFor("the next page of the large file", 10000, async () => ((await adds()) > before || (await big.locator("button.review-more").count()) === 0 ? true : null));
    assert(clicks < 20, "the large file ends");
  }
  const bigLines = await big.locator("pre.diff span.add").evaluateAll((els) => els.map((s) => s.textContent.replace(/\n$/, "")));
  const expected = Array.from({ length: 5000 }, (_, i) => `+big line ${i + 1}`);
  assert(clicks >= 1 && JSON.stringify(bigLines) === JSON.stringify(expected), `all 5,000 lines, in order, after ${clicks} pages: ${bigLines.length}`);
  await shot(page, "review-large-all");
  await page.click(".sheet-head button");

  // The session header: every change since the base commit, the first turn's too.
  await waitFor("the header's count", 20000, async () => ((await page.locator("#session-changes").textContent()) === "4 files changed" ? true : null));
  await page.click("#session-changes");
  await files.first().waitFor({ timeout: 10000 });
  const all = await files.evaluateAll((els) => els.map((el) => el.dataset.path));
  assert(JSON.stringify(all) === JSON.stringify(["README.md", "big.txt", "logo.png", "src/main.rs"]), `the session's four files: ${all}`);
  const readme = page.locator('.review-file[data-path="README.md"]');
  await readme.locator(".review-file-head").click();
  const readmeAdds = await readme.locator("pre.diff span.add").evaluateAll((els) => els.map((s) => s.textContent.replace(/\n$/, "")));
  assert(JSON.stringify(readmeAdds) === JSON.stringify(["+first turn"]), `README.md since the base: ${readmeAdds}`);
  await shot(page, "review-session");
  await page.click(".sheet-head button");
  await send("exit 0");
  await ctx.close();
});

scenario("navigating to another page of the origin leaves the service worker's cached shell alone", async ({ browser }) => {
  await rpc("echo", { session: "ra-shell" });
  const id = (await sessionByName("ra-shell")).id;
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${id}&token=${TOKEN}`);
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  const shell = () => page.evaluate(async () => (await (await caches.match("/"))?.text()) ?? "");
  await waitFor("the shell cached", 10000, async () => (await shell()).includes('id="app"'));
  // A navigation the worker serves (network first) to something that is not the app's page,
  // then the app offline: it must boot from the cached shell.
  await page.goto(`${URL_BASE}/manifest.webmanifest`);
  await ctx.setOffline(true);
  await page.goto(`${URL_BASE}/#/s/${id}`);
  const booted = await waitFor("the app offline", 10000, () => page.evaluate(() => (window.__moor !== undefined ? "app" : document.getElementById("app") ? null : document.body?.innerText.slice(0, 80) || null)));
  assert(booted === "app", `the app booted offline from the cached shell, not: ${booted}`);
  const cached = await shell();
  assert(cached.includes('id="app"'), `the cached shell is still the app's page: ${cached.slice(0, 80)}`);
  await ctx.setOffline(false);
  await ctx.close();
});

// ---- run
// MOOR_WEB_ONLY=<regex> does the same with a regular expression (as in the other scripts).
const only = process.env.MOOR_SCENARIO ?? "";
const re = process.env.MOOR_WEB_ONLY ? new RegExp(process.env.MOOR_WEB_ONLY) : null;
const pick = only || re ? (name) => (!only || name.includes(only)) && (!re || re.test(name)) : null;
await runScenarios("browser-reattach", scenarios, await launch({ bfcache: true }), pick);
