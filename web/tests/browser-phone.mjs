// Browser scenarios of a phone: Debian's Chromium at 390×844 with touch, against the real moord
// and moor that tests/tests/web.rs starts and controls (`rpc`). Each scenario is a defect of
// issue 15 played as the user met it, now true: what the banners say with the device offline and
// with the server unreachable (a fault proxy refusing connections), a removed member's page, a
// user with no role, an ended session, keystrokes and helper keys of a terminal, a terminal
// wider than the phone, touch targets and the empty list; and the machines view of `moor host`.
// Every wait is a condition with a timeout as a failure guard. Prints one line per scenario and "N passed, M failed".
// MOOR_WEB_ONLY=<regex> runs the matching scenarios only.

import {
  addUser, api, assert, banner, echoSessionOnPhone, launch, linesSession, loginContext, loginForm, openSession, phone, rpc, runScenarios,
  sessionByName, share, shot, TOKEN, untilEnded, URL_BASE, waitBanner, waitFor, WATCHDOG_MS,
} from "./lib.mjs";

const PTY_ECHO = "printf 'ready\\n'; while IFS= read -r l; do printf 'typed: [%s]\\n' \"$l\"; done";

const scenarios = [];
const scenario = (name, fn) => scenarios.push({ name, fn });

/** Keeps every state each banner takes, in order, in `window.__states[which]`; runs in every document. */
function stateRecorder() {
  window.__states = {};
  const note = (el) => {
    const which = el.id.replace(/-banner$/, "");
    const list = (window.__states[which] ??= []);
    const state = el.dataset.state ?? "";
    const text = el.textContent ?? "";
    const cls = el.className;
    const last = list[list.length - 1];
    if (!last || last.state !== state || last.text !== text) list.push({ state, text, cls, t: Date.now() });
  };
  new MutationObserver((records) => {
    for (const r of records) {
      const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
      if (el && /-banner$/.test(el.id)) note(el);
    }
  }).observe(document, { subtree: true, attributes: true, childList: true, characterData: true, attributeFilter: ["data-state", "class"] });
}
const states = (page, which) => page.evaluate((w) => window.__states?.[w] ?? [], which);
const bannerClass = (page, which) => page.evaluate((w) => document.getElementById(`${w}-banner`)?.className ?? "", which);

/** Requests a page makes for session `id` (info, stream, history). */
function sessionRequests(page, id) {
  const log = [];
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith(`/api/v1/sessions/${id}`)) log.push({ path: u.pathname, t: Date.now() });
  });
  return log;
}

scenario("1. offline is the device's: 'this device is offline', no attempt counter, the agent unknown (grey), then live again", async ({ browser }) => {
  await rpc("echo", { session: "ph-offline" });
  const info = await sessionByName("ph-offline");
  const ctx = await phone(browser);
  await ctx.addInitScript(stateRecorder);
  const page = await ctx.newPage();
  const log = sessionRequests(page, info.id);
  await page.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await waitBanner(page, "stream", "live", 20000);
  await waitBanner(page, "bridge", "online", 20000);
  // The phone loses its network.
  await ctx.setOffline(true);
  await waitBanner(page, "device", "offline", 5000);
  await waitBanner(page, "stream", "offline", WATCHDOG_MS + 3000);
  const agent = await waitBanner(page, "bridge", "unknown", 5000);
  assert(/unknown since .* \(last known: online/.test(agent.text), `the agent as last known: ${agent.text}`);
  assert(/\bmuted\b/.test(await bannerClass(page, "bridge")), "the agent banner is grey, not green");
  // Stay offline past the watchdog and a few backoffs: the page makes no attempt it cannot win.
  const requestsOffline = log.length;
  await waitFor("a watchdog interval offline", WATCHDOG_MS * 2 + 5000, async () => {
    const s = await states(page, "stream");
    return Date.now() - s[s.length - 1].t > WATCHDOG_MS;
  });
  assert(log.length === requestsOffline, `no request while offline (${log.length - requestsOffline} made)`);
  const said = await states(page, "stream");
  const bad = said.filter((s) => /unreachable|attempt/i.test(s.text));
  assert(!bad.length, `offline never called unreachable nor counted: ${JSON.stringify(bad)}`);
  const greenWhileDown = (await states(page, "bridge")).filter((s) => s.state === "online" && s.t > said.find((x) => x.state === "offline").t);
  assert(!greenWhileDown.length, "no green 'Agent online' while offline");
  await shot(page, "phone-offline");
  await ctx.setOffline(false);
  await waitFor("the device banner gone", 5000, () => page.evaluate(() => document.getElementById("device-banner").hidden));
  await waitFor("the stream live again", 20000, async () => ["back", "live"].includes((await banner(page, "stream")).state));
  await waitBanner(page, "bridge", "online", 10000);
  await ctx.close();
});

scenario("2. the server unreachable and the agent killed meanwhile: never green while the page cannot see, 'offline' once it can", async ({ browser }) => {
  const { url } = await rpc("proxy");
  await rpc("echo", { session: "ph-crash" });
  const info = await sessionByName("ph-crash");
  const ctx = await phone(browser);
  await ctx.addInitScript(stateRecorder);
  const page = await ctx.newPage();
  await page.goto(`${url}/#/s/${info.id}&token=${TOKEN}`);
  await waitBanner(page, "stream", "live", 20000);
  await waitBanner(page, "bridge", "online", 20000);
  // The server goes away for this page: every connection refused, the live ones broken.
  await rpc("proxy_refuse", { on: true });
  await rpc("proxy_reset");
  const down = await waitBanner(page, "stream", "unreachable", 20000);
  assert(/Server unreachable since .*attempt \d+/.test(down.text), `says the server is unreachable: ${down.text}`);
  assert((await banner(page, "device")).state === "online", "the device is not blamed");
  const agent = await waitBanner(page, "bridge", "unknown", 5000);
  assert(/\bmuted\b/.test(await bannerClass(page, "bridge")), `grey: ${agent.text}`);
  const downAt = Date.now();
  // The agent dies while the page cannot see it.
  await rpc("kill", { session: "ph-crash" });
  await waitFor("the server to see the bridge gone", 20000, async () => !(await api(`/sessions/${info.id}`)).bridge.online);
  await rpc("proxy_refuse", { on: false });
  const off = await waitBanner(page, "bridge", "offline", 30000);
  assert(/Agent offline since/.test(off.text), `the truth once the stream is back: ${off.text}`);
  const green = (await states(page, "bridge")).filter((s) => s.state === "online" && s.t > downAt);
  assert(!green.length, `never 'Agent online' after the server became unreachable: ${JSON.stringify(green)}`);
  await shot(page, "phone-agent-offline-after-unreachable");
  await rpc("restart", { session: "ph-crash" });
  await waitBanner(page, "bridge", "online", 20000);
  await ctx.close();
});

/** Waits until this device keeps the session's window up to at least `seq` (IndexedDB). */
const keptPast = (page, seq) => waitFor(`the window kept past seq ${seq}`, 20000, async () => (await page.evaluate(() => window.__moor.keptHi())) >= seq);

/** The server becomes unreachable for the pages that use the proxy: new connections refused, live ones broken. */
async function serverDown() {
  await rpc("proxy_refuse", { on: true });
  await rpc("proxy_reset");
}

scenario("3. a reload while the server is down shows the transcript, title and composer; back, it resumes from the stored cursor", async ({ browser }) => {
  const { url } = await rpc("proxy");
  const total = 3000;
  const info = await linesSession("ph-reload-down", total, 10);
  const ctx = await phone(browser);
  await ctx.addInitScript(stateRecorder);
  const page = await ctx.newPage();
  await page.goto(`${url}/#/s/${info.id}&token=${TOKEN}`);
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  await waitFor("entries past 600", 60000, () => page.evaluate(() => window.__moor.hi() >= 600));
  await serverDown();
  await waitBanner(page, "stream", "unreachable", 20000);
  const hiBefore = await page.evaluate(() => window.__moor.hi());
  await keptPast(page, hiBefore);
  // Reload with the server unreachable: the cached shell, then this device's window.
  const t0 = Date.now();
  await page.reload();
  await page.waitForFunction(() => window.__moor !== undefined);
  const shown = await waitFor("the kept transcript drawn", 10000, async () => {
    const v = await page.evaluate(() => ({ hi: window.__moor.hi(), rows: window.__moor.renderedSeqs().length, title: document.querySelector("h1.title")?.textContent, composer: !!document.getElementById("composer-text") }));
    return v.rows > 0 ? v : null;
  });
  console.log(`     kept transcript on screen ${Date.now() - t0} ms after the reload (server unreachable)`);
  assert(shown.hi >= hiBefore, `the page holds what it had (${shown.hi} < ${hiBefore})`);
  assert(shown.title === "ph-reload-down", `the title is the session's name: ${shown.title}`);
  assert(shown.composer, "the composer is there (what is sent waits in the outbox)");
  const agent = await banner(page, "bridge");
  assert(agent.state === "unknown" && /unknown since .*last known: online/.test(agent.text), `the agent as last known, not 'no bridge has connected yet': ${agent.text}`);
  await waitBanner(page, "stream", "unreachable", 20000);
  await shot(page, "phone-reload-server-down");
  // The server comes back: the stream resumes right after the kept window.
  const opened = [];
  page.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname === `/api/v1/sessions/${info.id}/events`) opened.push(Number(u.searchParams.get("after")));
    if (u.pathname === `/api/v1/sessions/${info.id}/entries`) opened.push(`entries ${u.search}`);
  });
  await rpc("proxy_refuse", { on: false });
  const back = await waitBanner(page, "stream", "back", 30000);
  assert(typeof opened[0] === "number" && opened[0] === shown.hi, `the stream resumed after ${opened[0]}, the kept window ends at ${shown.hi}: ${JSON.stringify(opened)}`);
  const k = Number(/Back: (\d+) missed/.exec(back.text)?.[1] ?? -1);
  assert(k >= 0 && k < total - shown.hi + 1, `missed counts only what came while away (${k}), not the kept entries`);
  await untilEnded(page, info.id);
  const seqs = await page.evaluate(() => window.__moor.seqs());
  for (let i = 1; i < seqs.length; i++) assert(seqs[i] === seqs[i - 1] + 1, `no gap or duplicate at ${i}`);
  await ctx.close();
});

scenario("4–5. a PTY session reloaded while the server is down keeps its terminal; an applied input stays applied", async ({ browser }) => {
  const { url } = await rpc("proxy");
  await rpc("pty", { session: "ph-pty-down", script: PTY_ECHO });
  const info = await sessionByName("ph-pty-down");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${url}/#/s/${info.id}&token=${TOKEN}`);
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  await waitFor("the program's output", 20000, () => page.evaluate(() => window.__moor.terminalText()?.includes("ready")));
  await page.tap("#terminal .xterm");
  await page.keyboard.type("before the outage");
  await page.keyboard.press("Enter");
  await waitFor("the echo", 20000, () => page.evaluate(() => window.__moor.terminalText()?.includes("typed: [before the outage]")));
  const applied = await waitFor("the keys applied", 20000, async () => {
    const entries = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries;
    const keys = entries.filter((e) => e.kind === "input.keys").map((e) => e.seq);
    const done = new Set(entries.filter((e) => e.kind === "input.applied").map((e) => e.payload.input_seq));
    return keys.length && keys.every((s) => done.has(s)) ? entries[entries.length - 1].seq : null;
  });
  await waitFor("the page past the receipts", 20000, () => page.evaluate((h) => window.__moor.hi() >= h, applied));
  await keptPast(page, applied);
  await serverDown();
  await page.reload();
  await page.waitForFunction(() => window.__moor !== undefined);
  // The terminal is written asynchronously: wait for the kept output, not its first character.
  let text = "";
  await waitFor("the terminal drawn from this device", 10000, async () => {
    text = (await page.evaluate(() => window.__moor.terminalText())) ?? "";
    return text.includes("typed: [before the outage]");
  }).catch(() => {});
  assert(text.includes("typed: [before the outage]"), `the terminal shows its output: ${text.slice(0, 200)}`);
  const pendingShown = await page.evaluate(() => [...document.querySelectorAll("#pending [data-receipt]")].map((el) => el.dataset.receipt));
  assert(!pendingShown.length, `nothing applied is shown as pending or queued: ${pendingShown}`);
  const inputs = await page.evaluate(() => window.__moor.inputTexts());
  assert(inputs.some((t) => t.includes("before the outage")), `the typed line is in the transcript: ${inputs}`);
  await shot(page, "phone-pty-reload-server-down");
  await rpc("proxy_refuse", { on: false });
  await waitFor("the stream back", 30000, async () => ["back", "live"].includes((await banner(page, "stream")).state));
  await page.tap("#terminal .xterm");
  await page.keyboard.type("after");
  await page.keyboard.press("Enter");
  await waitFor("the echo after the outage", 20000, () => page.evaluate(() => window.__moor.terminalText()?.includes("typed: [after]")));
  await ctx.close();
});

scenario("9. a removed member's page stops and says so, with a way back; a user with no role is told at once", async ({ browser }) => {
  await rpc("echo", { session: "ph-removed" });
  const info = await sessionByName("ph-removed");
  await addUser("ph-rita");
  await share(info.id, "ph-rita", "controller");
  const ctx = await phone(browser);
  await ctx.addInitScript(stateRecorder);
  await loginContext(ctx, "ph-rita");
  const page = await ctx.newPage();
  const log = sessionRequests(page, info.id);
  await page.goto(`${URL_BASE}/#/s/${info.id}`);
  await waitBanner(page, "stream", "live", 20000);
  await waitBanner(page, "bridge", "online", 20000);
  // The owner removes her.
  await api(`/sessions/${info.id}/members/ph-rita`, { method: "DELETE" });
  const removed = await waitBanner(page, "stream", "removed", 20000);
  assert(/access to this session was removed/.test(removed.text), `says it: ${removed.text}`);
  const agent = await banner(page, "bridge");
  assert(agent.state === "unknown", `the agent is not vouched for: ${agent.state} ${agent.text}`);
  const end = await page.evaluate(() => ({ bar: document.getElementById("end-bar")?.hidden === false, back: document.getElementById("end-back")?.getAttribute("href"), composer: !!document.getElementById("composer-text") }));
  assert(end.bar && end.back === "#/", `a way back to the list: ${JSON.stringify(end)}`);
  assert(!end.composer, "no composer on a session she cannot reach");
  await shot(page, "phone-access-removed");
  // No more attempts: through a full backoff cycle and a watchdog interval nothing is asked.
  const n = log.length;
  const since = Date.now();
  await waitFor("a quiet period longer than the backoff cap and the watchdog", 30000, async () => Date.now() - since > Math.max(6000, WATCHDOG_MS + 1000));
  assert(log.length === n, `no retry after access was removed (${log.length - n} requests)`);
  const s = await states(page, "stream");
  assert(s[s.length - 1].state === "removed" && !s.some((x) => /attempt \d/.test(x.text) && x.t > since), "the banner stays on 'removed'");
  await page.click("#end-back");
  await waitFor("the list", 10000, () => page.evaluate(() => !!document.getElementById("sessions")));

  // Someone with no role at all opening the link: told at once, no loop.
  await addUser("ph-nobody");
  const ctx2 = await phone(browser);
  await loginContext(ctx2, "ph-nobody");
  const p2 = await ctx2.newPage();
  const log2 = sessionRequests(p2, info.id);
  await p2.goto(`${URL_BASE}/#/s/${info.id}`);
  const gone = await waitBanner(p2, "stream", "gone", 10000);
  assert(/no role/.test(gone.text), `says why: ${gone.text}`);
  const n2 = log2.length;
  const t2 = Date.now();
  await waitFor("a quiet period", 20000, async () => Date.now() - t2 > 6000);
  assert(log2.length === n2, `no retries for a user with no role (${log2.length - n2})`);
  await ctx.close();
  await ctx2.close();
});

scenario("10. an ended session offers no composer but the recovery brief, checkpoints and the resume command", async ({ browser }) => {
  const info = await linesSession("ph-ended", 5, 0);
  await waitFor("the session to end", 60000, async () => (await api(`/sessions/${info.id}`)).status === "ended");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await page.waitForFunction(() => window.__moor !== undefined);
  await untilEnded(page, info.id);
  await waitFor("the end bar", 10000, () => page.evaluate(() => document.getElementById("end-bar")?.dataset.state === "ended" && !document.getElementById("end-bar").hidden));
  const seen = await page.evaluate(() => ({
    composer: !!document.getElementById("composer-text"),
    recovery: !!document.getElementById("end-recovery"),
    checkpoints: !!document.getElementById("end-checkpoints"),
    resume: document.getElementById("end-resume")?.textContent ?? "",
    agent: document.getElementById("bridge-banner")?.dataset.state,
  }));
  assert(!seen.composer, "no composer on an ended session");
  assert(seen.recovery && seen.checkpoints, `the recovery brief and checkpoints offered: ${JSON.stringify(seen)}`);
  assert(seen.resume.includes("moor resume ph-ended"), `the resume command to copy: ${seen.resume}`);
  assert(seen.agent === "ended", `the agent banner says ended: ${seen.agent}`);
  // The end bar is redrawn as the state settles: a tap on a button being replaced is lost, so tap
  // again until the sheet is up.
  await waitFor("the recovery sheet", 20000, async () => {
    const up = await page.evaluate(() => /Recovery brief/.test(document.querySelector(".sheet")?.textContent ?? ""));
    if (!up) await page.click("#end-recovery", { timeout: 2000 }).catch(() => {});
    return up;
  });
  await shot(page, "phone-ended");
  await ctx.close();
});

scenario("6–7. terminal: keystrokes fold into one line per burst; helper keys keep the keyboard on the terminal", async ({ browser }) => {
  await rpc("pty", { session: "ph-pty", script: PTY_ECHO });
  const info = await sessionByName("ph-pty");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await waitFor("the program's output", 20000, () => page.evaluate(() => document.querySelector("#terminal .xterm-rows")?.textContent?.includes("ready")));
  await page.tap("#terminal .xterm");
  const focused = () => page.evaluate(() => document.activeElement?.classList.contains("xterm-helper-textarea") ?? false);
  assert(await focused(), "the terminal has the keyboard");
  await page.keyboard.type("echo hello");
  // Tab through the helper key, then go on typing: the keys land in the terminal.
  await page.tap('#term-keys [data-key="Tab"]');
  assert(await focused(), "a tap on Tab leaves the focus on the terminal");
  await page.keyboard.type("x");
  await page.keyboard.press("Enter");
  await waitFor("the line in the terminal", 20000, () => page.evaluate(() => document.querySelector("#terminal .xterm-rows")?.textContent?.includes("typed: [echo hello\tx]") || document.querySelector("#terminal .xterm-rows")?.textContent?.includes("typed: [echo hello")));
  // Ctrl latch: Ctrl then c is Ctrl-C (the shell loop is interrupted and ends).
  const head0 = (await api(`/sessions/${info.id}`)).head_seq;
  await page.tap('#term-keys [data-key="Ctrl"]');
  assert(await focused(), "Ctrl keeps the focus on the terminal");
  assert(await page.evaluate(() => document.querySelector('#term-keys [data-key="Ctrl"]').getAttribute("aria-pressed")) === "true", "Ctrl is latched");
  await page.keyboard.type("c");
  const sent = await waitFor("the Ctrl-C input", 20000, async () => {
    const p = await api(`/sessions/${info.id}/entries?after=${head0}&limit=100`);
    return p.entries.find((e) => e.kind === "input.keys" && e.payload.text === "\u0003") ?? null;
  });
  assert(sent, "Ctrl + c sent as ^C");
  // The transcript under the terminal: one item for the burst, not one per key.
  const items = await page.evaluate(() => [...document.querySelectorAll(".item.i-input")].map((el) => el.textContent));
  const keys = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.keys");
  assert(keys.length >= 2, `several keys inputs were sent (${keys.length})`);
  const modelItems = await page.evaluate(() => window.__moor.inputTexts());
  assert(modelItems.length <= 3 && modelItems.some((t) => /^typed echo hello.*⏎$/.test(t)), `keys folded into a line per burst: ${JSON.stringify(modelItems)} (drawn: ${JSON.stringify(items)})`);
  // A Space typed right after a helper-key tap goes to the terminal, not to the button again.
  const resizes0 = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.resize").length;
  await page.tap("#term-zoom-in");
  await page.keyboard.press("Space");
  await page.keyboard.press("Enter");
  const resizes1 = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.resize").length;
  assert(resizes1 === resizes0, `no resize from a zoom tap and typing (${resizes1 - resizes0})`);
  await shot(page, "phone-pty-keys");
  // The keystrokes hidden behind the toggle: the transcript keeps the rest, the terminal all.
  const keysShown = () => page.evaluate(() => window.__moor.shownInputTexts().filter((t) => t.startsWith("typed")).length);
  assert((await keysShown()) > 0, "keystroke bursts are drawn by default");
  await page.tap("#keys-toggle");
  assert(await page.evaluate(() => document.getElementById("keys-toggle").getAttribute("aria-pressed")) === "true", "the toggle says keystrokes are hidden");
  await waitFor("the bursts gone from the transcript", 5000, async () => (await keysShown()) === 0 && (await page.evaluate(() => ![...document.querySelectorAll(".item.i-input")].some((el) => /typed/.test(el.textContent)))));
  assert((await page.evaluate(() => window.__moor.inputTexts().filter((t) => t.startsWith("typed")).length)) > 0, "hidden, not dropped");
  // The choice holds on this device: a reload keeps them hidden.
  await page.reload();
  await waitFor("the terminal again", 20000, () => page.evaluate(() => window.__moor?.terminalText()?.includes("ready")));
  await waitFor("the log loaded", 20000, () => page.evaluate(() => window.__moor.inputTexts().some((t) => t.startsWith("typed"))));
  assert((await keysShown()) === 0, "still hidden after a reload");
  await page.tap("#keys-toggle");
  await waitFor("the bursts back", 5000, async () => (await keysShown()) > 0);
  await ctx.close();
});

scenario("8. a terminal wider than the phone pans and zooms here; resizing everyone's is a labelled second tap", async ({ browser }) => {
  await rpc("pty", { session: "ph-wide", script: "stty cols 160 rows 30; printf 'wide\\n'; printf '%0160d\\n' 0; while IFS= read -r l; do echo \"$l\"; done" });
  const info = await sessionByName("ph-wide");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await waitFor("the output", 20000, () => page.evaluate(() => document.querySelector("#terminal .xterm-rows")?.textContent?.includes("wide")));
  // The terminal is as wide as the agent's (cols from the log's pty resize, else xterm's 80).
  const pan = await waitFor("a terminal wider than the screen", 20000, async () => {
    const p = await page.evaluate(() => {
      const s = document.getElementById("term-screen");
      return { sw: s.scrollWidth, cw: s.clientWidth };
    });
    return p.sw > p.cw + 20 ? p : null;
  });
  // Pan sideways with a finger.
  const moved = await page.evaluate(() => {
    const s = document.getElementById("term-screen");
    s.scrollLeft = 200;
    return s.scrollLeft;
  });
  assert(moved > 0, `the terminal pans sideways (${JSON.stringify(pan)})`);
  // Zoom out locally: narrower on this phone, no resize sent.
  const before = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.resize").length;
  for (let i = 0; i < 4; i++) await page.tap("#term-zoom-out");
  await waitFor("the terminal drawn smaller", 10000, () => page.evaluate((sw) => document.getElementById("term-screen").scrollWidth < sw, pan.sw));
  // One tap on resize only says what it would do.
  await page.tap("#term-resize");
  const label = await page.evaluate(() => document.getElementById("term-resize").textContent);
  assert(/Tap again: resize everyone's terminal to \d+×\d+/.test(label), `the first tap explains: ${label}`);
  const after1 = (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.resize").length;
  assert(after1 === before, "no resize on the first tap, nor from zooming");
  await page.tap("#term-resize");
  await waitFor("one resize input", 20000, async () => (await api(`/sessions/${info.id}/entries?after=0&limit=1000`)).entries.filter((e) => e.kind === "input.resize").length === before + 1);
  await shot(page, "phone-pty-wide");
  await ctx.close();
});

scenario("11. every tap target is at least 44×44; the empty list gives the server's URL and the two commands", async ({ browser }) => {
  const { page, ctx } = await echoSessionOnPhone(browser, "ph-touch");
  const small = async () =>
    page.evaluate(() =>
      [...document.querySelectorAll("button, a[href], [role=button]")]
        .filter((el) => el.offsetParent !== null && !el.closest(".vl-inner") && !el.closest(".xterm"))
        .map((el) => ({ what: el.id || el.textContent.trim().slice(0, 30), ...el.getBoundingClientRect().toJSON() }))
        .filter((r) => r.width < 44 - 0.5 || r.height < 44 - 0.5)
        .map((r) => `${r.what} ${Math.round(r.width)}×${Math.round(r.height)}`),
    );
  const inSession = await small();
  assert(!inSession.length, `targets under 44×44 in a session: ${inSession.join(", ")}`);
  await page.goto(`${URL_BASE}/#/`);
  await waitFor("the list", 10000, () => page.evaluate(() => document.querySelectorAll(".session-card").length > 0));
  const inList = await small();
  assert(!inList.length, `targets under 44×44 in the list: ${inList.join(", ")}`);
  await ctx.close();

  // A user with no session sees how to attach one to this very server.
  await addUser("ph-empty");
  const ctx2 = await phone(browser);
  await loginContext(ctx2, "ph-empty");
  const p2 = await ctx2.newPage();
  await p2.goto(`${URL_BASE}/#/`);
  const text = await waitFor("the empty state", 10000, () => p2.evaluate(() => document.getElementById("empty-state")?.textContent ?? null));
  assert(text.includes(`moor login ${URL_BASE}`), `the server's URL in moor login: ${text}`);
  assert(text.includes("moor run -- claude"), `the run command: ${text}`);
  await shot(p2, "phone-empty-list");
  await ctx2.close();
});

scenario("3b. needs you: a finished turn not yet seen and a lost bridge come first, badged, counted in the title and the app badge; an opened turn is seen", async ({ browser }) => {
  await rpc("claude", { session: "ph-turn" });
  const turn = await sessionByName("ph-turn");
  await waitFor("the agent started", 60000, async () => (await api(`/sessions/${turn.id}`)).state?.agent.running);
  await api(`/sessions/${turn.id}/inputs`, { method: "POST", body: JSON.stringify({ client_msg_id: "ph-turn-1", kind: "input.text", payload: { text: "Say hello." } }) });
  await waitFor("the turn finished", 120000, async () => (await api(`/sessions/${turn.id}`)).state?.turn.finished);
  await rpc("echo", { session: "ph-lost" });
  const lost = await sessionByName("ph-lost");
  await rpc("kill", { session: "ph-lost" });
  await waitFor("the server to see the bridge gone", 20000, async () => !(await api(`/sessions/${lost.id}`)).bridge.online);
  const ctx = await phone(browser);
  // The Badging API as the page calls it (Chromium has it only for installed apps).
  await ctx.addInitScript(() => {
    navigator.setAppBadge = (n) => ((window.__badge = n), Promise.resolve());
    navigator.clearAppBadge = () => ((window.__badge = 0), Promise.resolve());
  });
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/&token=${TOKEN}`);
  const list = () =>
    page.evaluate(() => ({
      cards: [...document.querySelectorAll(".session-card")].map((c) => ({ id: c.dataset.session, need: c.dataset.needsYou ?? null, text: c.textContent })),
      title: document.title,
      badge: window.__badge,
    }));
  const seen = await waitFor("both sessions flagged", 30000, async () => {
    const l = await list();
    const t = l.cards.find((c) => c.id === turn.id);
    const b = l.cards.find((c) => c.id === lost.id);
    return t?.need === "turn-unseen" && b?.need === "bridge-lost" ? l : null;
  });
  const t = seen.cards.find((c) => c.id === turn.id);
  assert(/needs you\s*finished its turn: not seen yet/.test(t.text), `the turn in words: ${t.text}`);
  assert(/the agent's bridge was lost/.test(seen.cards.find((c) => c.id === lost.id).text), "the lost bridge in words");
  const firstCalm = seen.cards.findIndex((c) => !c.need);
  assert(firstCalm === -1 || seen.cards.slice(firstCalm).every((c) => !c.need), `what needs you comes first: ${JSON.stringify(seen.cards.map((c) => c.need))}`);
  assert(seen.cards.findIndex((c) => c.id === lost.id) < seen.cards.findIndex((c) => c.id === turn.id), "a lost bridge before a turn to read");
  const n = seen.cards.filter((c) => c.need).length;
  assert(seen.title === `(${n}) Mooring`, `the title counts them: ${seen.title} for ${n}`);
  assert(seen.badge === n, `the app badge counts them: ${seen.badge} for ${n}`);
  await shot(page, "phone-needs-you");
  // Open the finished turn, read it, go back: it no longer waits on you.
  await page.tap(`.session-card[data-session="${turn.id}"]`);
  await waitFor("the session's state on screen", 30000, () => page.evaluate(() => window.__moor?.status().kind === "live"));
  // Inside a session, the title and the badge still count what needs you (the lost bridge).
  const inside = await waitFor("the count in the session's title", 30000, async () => {
    const l = await list();
    return /^\(\d+\) ph-turn · Mooring$/.test(l.title) ? l : null;
  });
  assert(inside.badge >= 1, `the badge still counts the lost bridge inside a session: ${inside.badge}`);
  await page.goto(`${URL_BASE}/#/`);
  const after = await waitFor("the turn seen", 30000, async () => {
    const l = await list();
    return l.cards.find((c) => c.id === turn.id) && !l.cards.find((c) => c.id === turn.id).need ? l : null;
  });
  const m = after.cards.filter((c) => c.need).length;
  assert(after.title === (m ? `(${m}) Mooring` : "Mooring") && m === n - 1, `one fewer counted: ${after.title}, ${m} of ${n}`);
  assert(after.cards.find((c) => c.id === lost.id).need === "bridge-lost", "the lost bridge still needs you");
  await ctx.close();
});

scenario("11b. a share link opened logged out says what it joins and as which role, then joins it", async ({ browser }) => {
  await rpc("echo", { session: "ph-shared" });
  const info = await sessionByName("ph-shared");
  await addUser("ph-sam");
  const made = await api(`/sessions/${info.id}/share-links`, { method: "POST", body: JSON.stringify({ role: "controller" }) });
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(made.url.replace(/^https?:\/\/[^/]+/, URL_BASE));
  await page.waitForSelector("#login-form", { timeout: 10000 });
  const what = await waitFor("what the link joins", 10000, () => page.evaluate(() => document.getElementById("join-what")?.dataset.role ? document.getElementById("join-what").textContent : null));
  assert(what.includes("“ph-shared”") && /as a controller: you can watch, write to the agent/.test(what), `the login page says it: ${what}`);
  await shot(page, "phone-join-login");
  await loginForm(page, "ph-sam");
  await waitFor("the session, joined", 20000, () => page.evaluate((id) => window.__moor?.id === id && !!document.getElementById("composer-text"), info.id));
  // The link had one use: spent now, and a second person is told so before logging in.
  const ctx2 = await phone(browser);
  const p2 = await ctx2.newPage();
  await p2.goto(made.url.replace(/^https?:\/\/[^/]+/, URL_BASE));
  const dead = await waitFor("the dead link said", 10000, () => p2.evaluate(() => (document.getElementById("join-what")?.className === "bad" ? document.getElementById("join-what").textContent : null)));
  assert(/expired, used up or revoked/.test(dead), `a spent link: ${dead}`);
  await ctx.close();
  await ctx2.close();
});

scenario("12. a microphone dictates into the composer where the browser recognises speech, and is not there where it cannot", async ({ browser }) => {
  await rpc("echo", { session: "ph-mic" });
  const info = await sessionByName("ph-mic");
  // A recognition that hears one sentence once started (the real one needs a microphone and a service).
  const ctx = await phone(browser);
  await ctx.addInitScript(() => {
    window.SpeechRecognition = window.webkitSpeechRecognition = class {
      start() {
        setTimeout(() => this.onresult?.({ resultIndex: 0, results: [{ isFinal: true, 0: { transcript: "run the tests" } }] }), 10);
      }
      stop() {
        this.onend?.();
      }
    };
  });
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await page.waitForSelector("#composer-text", { timeout: 20000 });
  await page.fill("#composer-text", "please");
  await page.tap("#mic");
  await waitFor("the words in the composer", 5000, () => page.evaluate(() => document.getElementById("composer-text").value === "please run the tests"));
  assert(await page.evaluate(() => document.getElementById("mic").getAttribute("aria-pressed")) === "true", "the button shows it listens");
  await page.tap("#mic");
  assert(await page.evaluate(() => document.getElementById("mic").getAttribute("aria-pressed")) === "false", "a second tap stops");
  const box = await page.evaluate(() => document.getElementById("mic").getBoundingClientRect().toJSON());
  assert(box.width >= 44 && box.height >= 44, `a thumb-sized button: ${JSON.stringify(box)}`);
  await shot(page, "phone-dictation");
  await ctx.close();
  // A browser without speech recognition: no button.
  const ctx2 = await phone(browser);
  await ctx2.addInitScript(() => {
    delete window.webkitSpeechRecognition;
    delete window.SpeechRecognition;
  });
  const p2 = await ctx2.newPage();
  await p2.goto(`${URL_BASE}/#/s/${info.id}&token=${TOKEN}`);
  await p2.waitForSelector("#composer-text", { timeout: 20000 });
  assert(!(await p2.evaluate(() => !!document.getElementById("mic"))), "no microphone without speech recognition");
  await ctx2.close();
});

scenario("13. machines: the phone starts a shell on a machine from its start sheet (checkpoint first), sees it run with its phase, restores its checkpoint into a new branch and worktree there, stops it (it ends) and resumes it in a linked session", async ({ browser }) => {
  await rpc("host", {});
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/machines&token=${TOKEN}`);
  await waitFor("the machine, online", 20000, () =>
    page.evaluate(() => document.querySelector('[data-machine] [data-link="online"]') !== null));
  await page.locator("[data-machine]").first().tap();
  const projects = await waitFor("the start sheet's projects", 10000, () =>
    page.evaluate(() => document.getElementById("start-project")?.textContent || null));
  assert(/notes · main · changes/.test(projects), `the project with its branch and dirty state: ${projects}`);
  await page.locator("#start-agent").selectOption("shell");
  await page.locator("#start-prompt").fill("");
  await page.locator("#start-checkpoint").check();
  await page.locator("#start-session").tap();
  await waitFor("the session running on the machine", 30000, () =>
    page.evaluate(() => document.querySelector('[data-machine-session] [data-action="stop"]') !== null));
  const phase = await page.evaluate(() => document.querySelector("[data-machine-session] [data-phase]")?.textContent ?? "");
  assert(phase.length > 0, "the session's phase is shown");
  const small = await page.evaluate(() =>
    [...document.querySelectorAll("#start-session, [data-action], #back")]
      .map((el) => el.getBoundingClientRect())
      .filter((r) => r.width < 44 || r.height < 44).length);
  assert(small === 0, `${small} machine controls under 44×44`);
  await shot(page, "phone-machine");
  // Its start checkpoint (the project has uncommitted changes; taken before the shell started,
  // as asked) goes onto a new branch there, checked out in a new worktree, from the session's
  // Checkpoints sheet; the machine reports the branch and where the worktree is.
  const [running] = (await api(`/machines/${(await api("/machines"))[0].id}`)).sessions;
  const checkpoints = await waitFor("the start checkpoint uploaded", 30000, async () => {
    const list = await api(`/sessions/${running.id}/checkpoints`);
    return list.length ? list : null;
  });
  const view = await ctx.newPage();
  await openSession(view, running.id);
  // The session's tools (with the review's "1 file changed") fit the phone: no sideways page.
  await waitFor("the review button", 30000, () => view.evaluate(() => /file/.test(document.querySelector("header .tools")?.textContent ?? "")));
  const wide = await view.evaluate(() => ({ page: document.documentElement.scrollWidth, screen: innerWidth }));
  // (A page wider than the screen makes a phone zoom out: the layout viewport grows past 390.)
  assert(wide.page <= 390 && wide.screen <= 390, `the page is wider than the phone: ${JSON.stringify(wide)}`);
  await view.locator("#checkpoints-btn").tap();
  const control = view.locator(`[data-checkpoint-id="${checkpoints[0].id}"] .restore`);
  await control.locator("input.restore-worktree").check();
  await control.locator("button.restore-go").tap();
  const said = await waitFor("the machine's answer", 30000, () =>
    view.evaluate(() => document.querySelector(".restore-status.ok")?.textContent || null));
  assert(said.includes(`Branch moor/restore-${checkpoints[0].id} now holds this checkpoint`) && said.includes("project notes"), `restored: ${said}`);
  assert(said.includes(`checked out in the worktree `) && said.includes(`/worktrees/notes/moor+restore-${checkpoints[0].id}`), `the worktree: ${said}`);
  await shot(view, "phone-restore");
  await view.close();
  await page.locator('[data-machine-session] [data-action="stop"]').tap();
  // The shell ignores SIGTERM: it is killed after the grace and its session ends, saying so;
  // an ended log is complete, so it offers no stop, but a resume: a new session linked to it.
  await waitFor("the stopped session shown ended", 30000, () =>
    page.evaluate(() => document.querySelector("[data-machine-session] [data-phase]")?.textContent === "ended"));
  const actions = await page.evaluate(() =>
    [...document.querySelectorAll("[data-machine-session] [data-action]")].map((b) => b.getAttribute("data-action")));
  assert(JSON.stringify(actions) === '["resume"]', `an ended session offers a resume only: ${JSON.stringify(actions)}`);
  await page.locator('[data-machine-session] [data-action="resume"]').tap();
  const continues = await waitFor("the continuation named", 10000, () =>
    page.evaluate(() => /continues in (\S+)/.exec(document.getElementById("start-result")?.textContent ?? "")?.[1] ?? null));
  await waitFor("the continuation running on the machine", 30000, () =>
    page.evaluate((name) => document.querySelector(`[data-machine-session="${name}"] [data-action="stop"]`) !== null, continues));
  const next = (await api(`/machines/${(await api("/machines"))[0].id}`)).sessions.find((s) => s.name === continues);
  const linked = (await api(`/sessions/${next.id}/entries?after=0&limit=50`)).entries.find((e) => e.kind === "session.continued_from");
  assert(linked?.payload.session === running.id, `the continuation is linked to the ended session: ${JSON.stringify(linked)}`);
  await page.locator(`[data-machine-session="${continues}"] [data-action="stop"]`).tap();
  await waitFor("the continuation shown ended", 30000, () =>
    page.evaluate((name) => document.querySelector(`[data-machine-session="${name}"] [data-phase]`)?.textContent === "ended", continues));
  await ctx.close();
});

// ---- run
const only = process.env.MOOR_WEB_ONLY ? new RegExp(process.env.MOOR_WEB_ONLY) : null;
await runScenarios("phone", scenarios, await launch(), only && ((name) => only.test(name)));
