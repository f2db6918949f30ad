// Browser scenarios for the web client: a real Chromium (Debian's, via playwright-core) against
// the real moord and moor, which tests/tests/web.rs starts and controls (`rpc`). Every wait is a
// condition with a timeout as a failure guard. Prints one line per scenario and
// "N passed, M failed"; screenshots at phone size go to $MOOR_ARTIFACTS.

import { mkdirSync } from "node:fs";
import {
  allEntries, api, ARTIFACTS, assert, banner, closeRpc, everything, launch, openSession, phone, rpc,
  sessionByName, TOKEN, URL_BASE, waitFor, WATCHDOG_MS,
} from "./lib.mjs";

mkdirSync(ARTIFACTS, { recursive: true });
const shot = (page, name) => page.screenshot({ path: `${ARTIFACTS}/${name}.png` });

const scenarios = [];
const scenario = (name, fn) => scenarios.push({ name, fn });

/** The page ends holding exactly the server's log: every seq once, in order, nothing else. */
async function assertExact(page, id, expectLines) {
  const server = await allEntries(id);
  const shown = await everything(page);
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

scenario("reload mid-stream, five times, while an agent prints 2,000 lines: every entry once, in order", async ({ browser }) => {
  await rpc("lines", { session: "web-reload", count: 2000, interval_ms: 4 });
  const info = await sessionByName("web-reload");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  for (let n = 1; n <= 5; n++) {
    // Reload at growing points of the stream, taken from what the page shows, not from time.
    const at = n * 300;
    await waitFor(`the page to reach seq ${at}`, 60000, () => page.evaluate((a) => window.__moor.hi() >= a, at));
    await page.reload();
    await page.waitForFunction(() => window.__moor !== undefined);
  }
  await waitFor("the session to end", 90000, async () => (await api(`/sessions/${info.id}`)).status === "ended");
  const head = (await api(`/sessions/${info.id}`)).head_seq;
  await waitFor("the page to reach the head", 30000, () => page.evaluate((h) => window.__moor.hi() === h, head));
  await assertExact(page, info.id, Array.from({ length: 2000 }, (_, i) => `line-${i + 1}`));
  await shot(page, "session-lines");
  await ctx.close();
});

scenario("offline for a while: 'reconnecting' within the watchdog interval, then 'back, k missed entries'", async ({ browser }) => {
  await rpc("lines", { session: "web-offline", count: 800, interval_ms: 20 });
  const info = await sessionByName("web-offline");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("live", 20000, async () => (await banner(page, "stream")).state === "live");
  await waitFor("some entries", 20000, () => page.evaluate(() => window.__moor.hi() > 20));
  const t0 = Date.now();
  await ctx.setOffline(true);
  await waitFor("the banner to say reconnecting", WATCHDOG_MS + 3000, async () => (await banner(page, "stream")).state === "reconnecting");
  const took = Date.now() - t0;
  // The watchdog interval, plus slack for a loaded CI machine.
  assert(took <= WATCHDOG_MS + 2000, `reconnecting shown after ${took} ms (watchdog ${WATCHDOG_MS} ms)`);
  assert(/Reconnecting, attempt \d+/.test((await banner(page, "stream")).text), "says which attempt");
  await shot(page, "session-reconnecting");
  // Stay offline while the agent writes at least 40 more entries and the watchdog has fired.
  const hiOff = await page.evaluate(() => window.__moor.hi());
  await waitFor("entries written while offline", 30000, async () => (await api(`/sessions/${info.id}`)).head_seq > hiOff + 40);
  const still = await banner(page, "stream");
  assert(still.state === "reconnecting", `still reconnecting while offline, not ${still.state}`);
  await ctx.setOffline(false);
  const back = await waitFor("the banner to say back", 20000, async () => {
    const b = await banner(page, "stream");
    return b.state === "back" ? b : null;
  });
  const k = Number(/Back: (\d+) missed/.exec(back.text)?.[1] ?? -1);
  assert(k >= 40, `k missed entries replayed: ${back.text}`);
  await shot(page, "session-back");
  await waitFor("the session to end", 60000, async () => (await api(`/sessions/${info.id}`)).status === "ended");
  const head = (await api(`/sessions/${info.id}`)).head_seq;
  await waitFor("the page to reach the head", 30000, () => page.evaluate((h) => window.__moor.hi() === h, head));
  await assertExact(page, info.id, Array.from({ length: 800 }, (_, i) => `line-${i + 1}`));
  await ctx.close();
});

scenario("bridge killed: 'agent offline since …' within seconds; restarted: 'online' again", async ({ browser }) => {
  await rpc("echo", { session: "web-bridge" });
  const info = await sessionByName("web-bridge");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("agent online", 20000, async () => (await banner(page, "bridge")).state === "online");
  const t0 = Date.now();
  await rpc("kill", { session: "web-bridge" });
  const off = await waitFor("agent offline", 15000, async () => {
    const b = await banner(page, "bridge");
    return b.state === "offline" ? b : null;
  });
  assert(/Agent offline since \d/.test(off.text), `banner: ${off.text}`);
  assert(Date.now() - t0 < 8000, `offline shown after ${Date.now() - t0} ms`);
  await shot(page, "session-agent-offline");
  await rpc("restart", { session: "web-bridge" });
  await waitFor("agent online again", 20000, async () => (await banner(page, "bridge")).state === "online");
  await ctx.close();
});

scenario("a message sent while the bridge is offline is queued, survives a reload, ends applied once", async ({ browser }) => {
  await rpc("echo", { session: "web-queued" });
  const info = await sessionByName("web-queued");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("agent online", 20000, async () => (await banner(page, "bridge")).state === "online");
  await rpc("kill", { session: "web-queued" });
  await waitFor("agent offline", 10000, async () => (await banner(page, "bridge")).state === "offline");
  const text = "hello while the agent is away";
  await page.fill("#composer-text", text);
  await page.click("#composer button.send");
  const receipt = (p) => p.evaluate((t) => {
    const b = [...document.querySelectorAll(".bubble.user")].find((el) => el.firstElementChild?.textContent === t);
    return b?.querySelector("[data-receipt]")?.getAttribute("data-receipt") ?? null;
  }, text);
  await waitFor("the message queued", 10000, async () => (await receipt(page)) === "queued");
  await shot(page, "session-queued");
  await page.reload();
  await page.waitForFunction(() => window.__moor !== undefined);
  await waitFor("still queued after the reload", 10000, async () => (await receipt(page)) === "queued");
  await rpc("restart", { session: "web-queued" });
  await waitFor("the message applied", 20000, async () => (await receipt(page)) === "applied");
  await shot(page, "session-applied");
  const log = await allEntries(info.id);
  const inputs = log.filter((e) => e.kind === "input.text" && e.payload.text === text);
  assert(inputs.length === 1, `stored once (${inputs.length})`);
  const applied = log.filter((e) => e.kind === "input.applied" && e.payload.input_seq === inputs[0].seq);
  assert(applied.length === 1, `applied once (${applied.length})`);
  const echoed = await waitFor("the agent's echo", 10000, async () => {
    const l = (await allEntries(info.id)).filter((e) => e.kind === "agent.output" && e.payload.text === `got: ${text}`);
    return l.length ? l : null;
  });
  assert(echoed.length === 1, `the agent got it once (${echoed.length})`);
  await ctx.close();
});

scenario("a message written while the browser is offline waits in IndexedDB across an offline reload", async ({ browser }) => {
  await rpc("echo", { session: "web-outbox" });
  const info = await sessionByName("web-outbox");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("agent online", 20000, async () => (await banner(page, "bridge")).state === "online");
  // The service worker caches the shell, so the page reloads without a network.
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  await ctx.setOffline(true);
  const text = "written on a train";
  await page.fill("#composer-text", text);
  await page.click("#composer button.send");
  const pendingState = (p) => p.evaluate(() => document.querySelector("#pending [data-receipt]")?.getAttribute("data-receipt") ?? null);
  await waitFor("waiting to send", 10000, async () => (await pendingState(page)) === "sending");
  await page.reload();
  await page.waitForFunction(() => window.__moor !== undefined);
  await waitFor("still waiting after the offline reload", 10000, async () => (await pendingState(page)) === "sending");
  await shot(page, "session-outbox-offline");
  await ctx.setOffline(false);
  await waitFor("the message applied", 30000, () =>
    page.evaluate((t) => {
      const b = [...document.querySelectorAll(".bubble.user")].find((el) => el.firstElementChild?.textContent === t);
      return b?.querySelector("[data-receipt]")?.getAttribute("data-receipt") === "applied";
    }, text),
  );
  const log = await allEntries(info.id);
  assert(log.filter((e) => e.kind === "input.text" && e.payload.text === text).length === 1, "stored once");
  assert(log.filter((e) => e.kind === "agent.output" && e.payload.text === `got: ${text}`).length === 1, "applied once");
  await ctx.close();
});

scenario("Approve and Deny from the page reach a real Claude Code permission request; viewers get no buttons", async ({ browser }) => {
  const { project } = await rpc("claude", { session: "web-claude" });
  const info = await sessionByName("web-claude");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("agent online", 30000, async () => (await banner(page, "bridge")).state === "online");
  const permCard = async (n) =>
    page.evaluate((n) => {
      const cards = document.querySelectorAll(".card.perm");
      const c = cards[n];
      return c ? { pending: c.classList.contains("pending"), text: c.textContent } : null;
    }, n);

  // deny
  await page.fill("#composer-text", `[[bash:touch ${project}/denied.txt]]`);
  await page.click("#composer button.send");
  await waitFor("a permission request on the page", 60000, async () => (await permCard(0))?.pending);
  // A viewer sees the request, and no way to decide it or to write.
  const vctx = await phone(browser);
  await vctx.route("**/api/v1/me", (route) => route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify({ name: "guest", role: "viewer" }) }));
  const viewer = await vctx.newPage();
  await openSession(viewer, info.id);
  await waitFor("the viewer sees the request", 20000, () => viewer.evaluate(() => !!document.querySelector(".card.perm.pending")));
  assert(await viewer.evaluate(() => !document.querySelector("#composer") && !document.querySelector("button.approve, button.deny")), "viewer has no composer and no Approve/Deny");
  await shot(viewer, "session-viewer");
  await vctx.close();
  await shot(page, "session-permission");
  await page.click(".card.perm.pending button.deny");
  await waitFor("the request denied", 60000, async () => /deny/.test((await permCard(0))?.text ?? "") && !(await permCard(0)).pending);
  let log = await allEntries(info.id);
  const denied = log.find((e) => e.kind === "agent.permission.resolved");
  assert(denied?.payload.decision === "deny" && denied.payload.by === "user:admin", "resolved as deny by the page's user");
  await waitFor("the denied turn to end", 60000, async () => (await allEntries(info.id)).some((e) => e.kind === "agent.result"));

  // approve
  await page.fill("#composer-text", `[[bash:touch ${project}/approved.txt]]`);
  await page.click("#composer button.send");
  await waitFor("a second permission request", 60000, async () => (await permCard(1))?.pending);
  await page.click(".card.perm.pending button.approve");
  await waitFor("the approved tool to finish", 60000, () =>
    page.evaluate(() => [...document.querySelectorAll(".card.tool")].some((c) => c.classList.contains("st-ok"))),
  );
  log = await allEntries(info.id);
  const decisions = log.filter((e) => e.kind === "agent.permission.resolved").map((e) => e.payload.decision);
  assert(JSON.stringify(decisions) === JSON.stringify(["deny", "allow"]), `decisions ${decisions}`);
  const results = log.filter((e) => e.kind === "agent.tool_result").map((e) => e.payload.is_error);
  assert(JSON.stringify(results) === JSON.stringify([true, false]), `tool results ${results}`);
  await waitFor("the approved turn to end", 60000, async () => (await allEntries(info.id)).filter((e) => e.kind === "agent.result").length >= 2);
  await shot(page, "session-claude");
  await page.click("#state-btn");
  await shot(page, "sheet-state");
  await page.click(".sheet-head button");
  await page.click("#share-btn");
  await waitFor("a QR code", 5000, () => page.evaluate(() => !!document.querySelector(".qr svg")));
  await shot(page, "sheet-share");
  await page.click(".sheet-head button");
  // The bridge dies mid-work: the page offers the recovery brief.
  await page.fill("#composer-text", `[[bash:touch ${project}/interrupted.txt]]`);
  await page.click("#composer button.send");
  await waitFor("a third permission request", 60000, async () => (await permCard(2))?.pending);
  await rpc("kill", { session: "web-claude" });
  await waitFor("the recovery bar", 20000, () => page.evaluate(() => !document.getElementById("recovery-bar").hidden));
  await page.click("#recovery-btn");
  await waitFor("the brief", 10000, () => page.evaluate(() => !!document.querySelector(".recovery")));
  await shot(page, "sheet-recovery");
  await ctx.close();
});

scenario("a viewer's forged input is refused by the server", async () => {
  // Roles arrive with the access work; until a server can mint a viewer token, there is nothing
  // to forge with. Kept as an explicit skip so it is not forgotten.
  return "skip: the server has no viewer tokens yet (every token is admin)";
});

scenario("PTY session: terminal view with keyboard input", async ({ browser }) => {
  await rpc("pty", { session: "web-pty", script: "printf 'ready\\n'; while read -r l; do echo \"typed: $l\"; done" });
  const info = await sessionByName("web-pty");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitFor("the terminal", 20000, () => page.evaluate(() => !!document.querySelector("#terminal .xterm")));
  await waitFor("the program's output", 20000, () => page.evaluate(() => document.querySelector("#terminal .xterm-rows")?.textContent?.includes("ready")));
  await page.click("#terminal .xterm");
  await page.keyboard.type("hi there");
  await page.keyboard.press("Enter");
  await waitFor("the echo in the terminal", 20000, () => page.evaluate(() => document.querySelector("#terminal .xterm-rows")?.textContent?.includes("typed: hi there")));
  await shot(page, "session-pty");
  await ctx.close();
});

scenario("session list and dark mode at phone size", async ({ browser }) => {
  for (const scheme of ["light", "dark"]) {
    const ctx = await phone(browser, { colorScheme: scheme });
    const page = await ctx.newPage();
    await page.goto(`${URL_BASE}/#token=${TOKEN}`);
    await waitFor("session cards", 10000, () => page.evaluate(() => document.querySelectorAll(".session-card").length >= 3));
    await shot(page, `list-${scheme}`);
    if (scheme === "dark") {
      const id = (await api("/sessions/web-reload")).id;
      await page.goto(`${URL_BASE}/#/s/${id}`);
      await page.waitForFunction(() => window.__moor !== undefined);
      await waitFor("rows", 10000, () => page.evaluate(() => window.__moor.renderedSeqs().length > 0));
      await shot(page, "session-lines-dark");
    }
    await ctx.close();
  }
});

scenario("a share link without a token asks for one, then shows the session", async ({ browser }) => {
  const id = (await api("/sessions/web-reload")).id;
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${id}`);
  await page.waitForSelector(".token-form input", { timeout: 10000 });
  await shot(page, "token-prompt");
  await page.fill(".token-form input", TOKEN);
  await page.click(".token-form button");
  await page.waitForFunction(() => window.__moor && window.__moor.renderedSeqs().length > 0, null, { timeout: 10000 });
  await ctx.close();
});

scenario("installable: manifest, icons and a service worker that never caches session data", async ({ browser }) => {
  const manifest = await (await fetch(`${URL_BASE}/manifest.webmanifest`)).json();
  assert(manifest.display === "standalone" && manifest.icons.some((i) => i.sizes === "512x512"), "manifest with a 512 icon");
  for (const i of manifest.icons) assert((await fetch(`${URL_BASE}${i.src}`)).ok, `icon ${i.src}`);
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  const id = (await api("/sessions/web-reload")).id;
  await openSession(page, id);
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  const cached = await page.evaluate(async () => {
    const out = [];
    for (const k of await caches.keys()) for (const r of await (await caches.open(k)).keys()) out.push(new URL(r.url).pathname);
    return out;
  });
  assert(cached.includes("/") && cached.some((p) => p.startsWith("/assets/")), `shell cached: ${cached}`);
  assert(!cached.some((p) => p.startsWith("/api/")), `no session data cached: ${cached}`);
  await ctx.close();
});

// ---- run
const browser = await launch();
let passed = 0;
let failed = 0;
let skipped = 0;
for (const s of scenarios) {
  const t0 = Date.now();
  try {
    const r = await s.fn({ browser });
    if (typeof r === "string" && r.startsWith("skip")) {
      skipped++;
      console.log(`SKIP ${s.name}: ${r.slice(6)}`);
    } else {
      passed++;
      console.log(`ok   ${s.name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    }
  } catch (e) {
    failed++;
    console.log(`FAIL ${s.name}: ${e.stack ?? e}`);
  }
}
await browser.close();
closeRpc();
console.log(`browser: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
