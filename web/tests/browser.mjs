// Browser scenarios for the web client: a real Chromium (Debian's, via playwright-core) against
// the real moord and moor, which tests/tests/web.rs starts and controls (`rpc`). Every wait is a
// condition with a timeout as a failure guard. Prints one line per scenario and
// "N passed, M failed"; screenshots at phone size go to $MOOR_ARTIFACTS.

import {
  addUser, allEntries, api, assert, assertExact, banner, echoSessionOnPhone, launch, linesSession, loginContext, loginForm,
  openOnPhone, openSession, numbered, PASSWORD, phone, rpc, runScenarios, sessionByName, share, shot, SHORT, shortApi, TOKEN,
  untilEnded, URL_BASE, waitBanner, waitFor, WATCHDOG_MS,
} from "./lib.mjs";

const scenarios = [];
const scenario = (name, fn) => scenarios.push({ name, fn });

scenario("first admin: the one-time setup link creates the admin account and logs it in", async ({ browser }) => {
  const { link } = await rpc("setup_link");
  assert(link, "moord printed a #/setup&code= link at its first start");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(link);
  await page.waitForSelector("#setup-form", { timeout: 10000 });
  await page.fill("#setup-name", "root-admin");
  await page.fill("#setup-password", PASSWORD);
  await page.fill("#setup-password2", `${PASSWORD} typo`);
  await page.click("#setup-submit");
  await waitFor("the mismatch said", 5000, () => page.evaluate(() => /differ/.test(document.getElementById("setup-error")?.textContent ?? "")));
  await page.fill("#setup-password2", PASSWORD);
  await shot(page, "setup");
  await page.click("#setup-submit");
  await waitFor("logged in on the session list", 10000, () => page.evaluate(() => location.hash === "#/" && document.getElementById("who")?.textContent === "root-admin"));
  // The link has done its job: opening it again goes to the login page.
  const again = await ctx.newPage();
  await again.goto(link);
  await waitFor("the used link sends to the login", 10000, () => again.evaluate(() => location.hash === "#/login"));
  await ctx.close();
});

scenario("reload mid-stream, five times, while an agent prints 2,000 lines: every entry once, in order", async ({ browser }) => {
  const info = await linesSession("web-reload", 2000, 4);
  const { ctx, page } = await openOnPhone(browser, info.id);
  for (let n = 1; n <= 5; n++) {
    // Reload at growing points of the stream, taken from what the page shows, not from time.
    const at = n * 300;
    await waitFor(`the page to reach seq ${at}`, 60000, () => page.evaluate((a) => window.__moor.hi() >= a, at));
    await page.reload();
    await page.waitForFunction(() => window.__moor !== undefined);
  }
  await untilEnded(page, info.id);
  await assertExact(page, info.id, numbered(2000));
  await shot(page, "session-lines");
  await ctx.close();
});

scenario("offline for a while: 'not connected: this device is offline' at once, then 'back, k missed entries'", async ({ browser }) => {
  const info = await linesSession("web-offline", 800, 20);
  const { ctx, page } = await openOnPhone(browser, info.id);
  await waitBanner(page, "stream", "live", 20000);
  await waitFor("some entries", 20000, () => page.evaluate(() => window.__moor.hi() > 20));
  const t0 = Date.now();
  await ctx.setOffline(true);
  await waitBanner(page, "stream", "offline", WATCHDOG_MS + 3000);
  const took = Date.now() - t0;
  // The browser's offline event, or at worst the watchdog interval, plus slack for a loaded CI machine.
  assert(took <= WATCHDOG_MS + 2000, `offline shown after ${took} ms (watchdog ${WATCHDOG_MS} ms)`);
  assert((await banner(page, "device")).state === "offline", "the device banner says offline");
  assert(!/attempt|unreachable/i.test((await banner(page, "stream")).text), "no attempt counter, no blame on the server");
  await shot(page, "session-reconnecting");
  // Stay offline while the agent writes at least 40 more entries and the watchdog has fired.
  const hiOff = await page.evaluate(() => window.__moor.hi());
  await waitFor("entries written while offline", 30000, async () => (await api(`/sessions/${info.id}`)).head_seq > hiOff + 40);
  const still = await banner(page, "stream");
  assert(still.state === "offline", `still offline, not ${still.state}`);
  await ctx.setOffline(false);
  const back = await waitBanner(page, "stream", "back", 20000);
  const k = Number(/Back: (\d+) missed/.exec(back.text)?.[1] ?? -1);
  assert(k >= 40, `k missed entries replayed: ${back.text}`);
  await shot(page, "session-back");
  await untilEnded(page, info.id);
  await assertExact(page, info.id, numbered(800));
  await ctx.close();
});

scenario("bridge killed: 'agent offline since …' within seconds; restarted: 'online' again", async ({ browser }) => {
  const { info, ctx, page } = await echoSessionOnPhone(browser, "web-bridge");
  const t0 = Date.now();
  await rpc("kill", { session: "web-bridge" });
  const off = await waitBanner(page, "bridge", "offline", 15000);
  assert(/Agent offline since \d/.test(off.text), `banner: ${off.text}`);
  assert(Date.now() - t0 < 8000, `offline shown after ${Date.now() - t0} ms`);
  await shot(page, "session-agent-offline");
  await rpc("restart", { session: "web-bridge" });
  await waitBanner(page, "bridge", "online", 20000);
  await ctx.close();
});

scenario("a message sent while the bridge is offline is queued, survives a reload, ends applied once", async ({ browser }) => {
  const { info, ctx, page } = await echoSessionOnPhone(browser, "web-queued");
  await rpc("kill", { session: "web-queued" });
  await waitBanner(page, "bridge", "offline", 10000);
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
  const { info, ctx, page } = await echoSessionOnPhone(browser, "web-outbox");
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
  const stored = log.filter((e) => e.kind === "input.text" && e.payload.text === text).length;
  assert(stored === 1, `stored once (${stored})`);
  // "applied" means moor wrote it to the agent; the agent's echo is its own later entry.
  const echoed = await waitFor("the agent's echo", 10000, async () => {
    const l = (await allEntries(info.id)).filter((e) => e.kind === "agent.output" && e.payload.text === `got: ${text}`);
    return l.length ? l : null;
  });
  assert(echoed.length === 1, `the agent got it once (${echoed.length})`);
  await ctx.close();
});

scenario("Approve and Deny from the page reach a real Claude Code permission request; viewers get no buttons", async ({ browser }) => {
  const { project } = await rpc("claude", { session: "web-claude" });
  const info = await sessionByName("web-claude");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await waitBanner(page, "bridge", "online", 30000);
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
  // A real viewer (an account given the viewer role) sees the request, and no way to decide it
  // or to write.
  await addUser("vic");
  await share(info.id, "vic", "viewer");
  const vctx = await phone(browser);
  await loginContext(vctx, "vic");
  const viewer = await vctx.newPage();
  await viewer.goto(`${URL_BASE}/#/s/${info.id}`);
  await viewer.waitForFunction(() => window.__moor !== undefined);
  await waitFor("the viewer sees the request", 20000, () => viewer.evaluate(() => !!document.querySelector(".card.perm.pending")));
  await waitFor("the viewer's read-only note", 10000, () => viewer.evaluate(() => !!document.getElementById("readonly-note")));
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
  // Approved from the sticky bar above the composer (within thumb reach), not the card.
  const bar = await waitFor("the decision bar", 10000, () => page.evaluate(() => {
    const b = document.getElementById("decision-bar");
    return b && !b.hidden ? { text: b.textContent, bottom: b.getBoundingClientRect().bottom, h: innerHeight } : null;
  }));
  assert(/Bash waits for your decision/.test(bar.text) && bar.bottom > bar.h / 2, `a sticky decision bar in the lower half: ${JSON.stringify(bar)}`);
  await page.click("#decision-bar button.approve");
  await waitFor("the approved tool to finish", 60000, () =>
    page.evaluate(() => [...document.querySelectorAll(".card.tool")].some((c) => c.classList.contains("st-ok"))),
  );
  await waitFor("the decision bar gone", 20000, () => page.evaluate(() => document.getElementById("decision-bar").hidden));
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
  await page.click("#share-create");
  await waitFor("a QR code", 5000, () => page.evaluate(() => !!document.querySelector("#share-qr svg")));
  await shot(page, "sheet-share");
  await page.click(".sheet-head button");
  // The bridge dies mid-work: the page offers the recovery brief.
  await page.fill("#composer-text", `[[bash:touch ${project}/interrupted.txt]]`);
  await page.click("#composer button.send");
  // The decision bar shows up as the request's rows arrive; the transcript shrinks under it and
  // still follows the newest row (no "↓ newest" button), so the request itself is on screen.
  // (Found by its command: the virtual list may no longer draw the two earlier cards.)
  await waitFor("a third permission request", 60000, () =>
    page.evaluate(() => [...document.querySelectorAll(".card.perm.pending")].some((c) => c.textContent.includes("interrupted.txt"))));
  assert(await page.evaluate(() => document.querySelector("button.jump").hidden), "the transcript still follows the newest rows");
  await rpc("kill", { session: "web-claude" });
  await waitFor("the recovery bar", 20000, () => page.evaluate(() => !document.getElementById("recovery-bar").hidden));
  await page.click("#recovery-btn");
  await waitFor("the brief", 10000, () => page.evaluate(() => !!document.querySelector(".recovery")));
  await shot(page, "sheet-recovery");
  await ctx.close();
});

scenario("log in through the form as a real user: back where the link pointed, only their sessions, then log out", async ({ browser }) => {
  await addUser("olive");
  await rpc("echo", { session: "web-olive" });
  await rpc("echo", { session: "web-not-olives" });
  const mine = await sessionByName("web-olive");
  await sessionByName("web-not-olives");
  await share(mine.id, "olive", "owner");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${mine.id}`);
  // No credentials: the login page, which says plainly what is wrong.
  await waitFor("the login page", 10000, () => page.evaluate(() => location.hash === "#/login"));
  await loginForm(page, "olive", "not her password");
  await waitFor("the refusal", 10000, () => page.evaluate(() => document.getElementById("login-error")?.textContent === "Wrong name or password."));
  await shot(page, "login-wrong-password");
  await loginForm(page, "olive");
  // Back at the session the link named, as its owner: composer and Share.
  await waitFor("back at the session", 10000, () => page.evaluate((id) => location.hash === `#/s/${id}`, mine.id));
  await page.waitForFunction(() => window.__moor !== undefined);
  await waitFor("the composer and Share", 20000, () => page.evaluate(() => !!document.querySelector("#composer") && !document.getElementById("share-btn").hidden));
  await page.goto(`${URL_BASE}/#/`);
  await waitFor("her session list", 10000, () => page.evaluate(() => document.querySelectorAll(".session-card").length > 0));
  const listed = await page.evaluate(() => [...document.querySelectorAll(".session-card")].map((c) => c.dataset.session));
  assert(JSON.stringify(listed) === JSON.stringify([mine.id]), `olive sees only her session: ${listed}`);
  await waitFor("the list to say who is logged in", 10000, () => page.evaluate(() => document.getElementById("who").textContent === "olive"));
  await shot(page, "list-logged-in");
  await page.click("#logout");
  await waitFor("the login page after logging out", 10000, () => page.evaluate(() => location.hash === "#/login"));
  const after = await page.evaluate(async () => (await fetch("/api/v1/sessions")).status);
  assert(after === 401, `the page's cookies no longer work after logout (${after})`);
  await ctx.close();
});

scenario("a share link with a QR code makes a real viewer: no composer, no Approve/Deny, a forged input refused with 403; the owner lists, changes and revokes who has access", async ({ browser }) => {
  const session = await sessionByName("web-olive");
  // olive (owner) makes a viewer link in the share dialog.
  const octx = await phone(browser);
  await loginContext(octx, "olive");
  const owner = await octx.newPage();
  await owner.goto(`${URL_BASE}/#/s/${session.id}`);
  await owner.waitForFunction(() => window.__moor !== undefined);
  await waitFor("Share for the owner", 20000, () => owner.evaluate(() => !document.getElementById("share-btn").hidden));
  await owner.click("#share-btn");
  await owner.selectOption("#share-role", "viewer");
  await owner.selectOption("#share-expiry", "3600");
  await owner.fill("#share-uses", "2");
  await owner.click("#share-create");
  await waitFor("a QR code of the link", 10000, () => owner.evaluate(() => !!document.querySelector("#share-qr svg")));
  const link = await owner.inputValue("#share-url");
  assert(link.startsWith(`${URL_BASE}/#/join&link=`), `the link opens the join page: ${link}`);
  await shot(owner, "sheet-share-link");
  // Adding a person by name, with a role.
  await addUser("walt");
  await owner.fill("#member-name", "walt");
  await owner.selectOption("#member-role", "controller");
  await owner.click("#member-add");
  // An offer: listed as such to olive, nothing for walt until he accepts it on his list.
  await waitFor("walt offered", 10000, () => owner.evaluate(() => /Offered walt the controller role/.test(document.getElementById("member-status").textContent)));
  await waitFor("walt listed as offered", 10000, () =>
    owner.evaluate(() => document.querySelector('#share-members li[data-member="walt"]')?.dataset.pending === "true"),
  );
  await shot(owner, "sheet-share-offered");
  const walt = await (await fetch(`${URL_BASE}/api/v1/auth/login`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ name: "walt", password: PASSWORD }) })).json();
  const before = (await fetch(`${URL_BASE}/api/v1/sessions/${session.id}`, { headers: { Authorization: `Bearer ${walt.access_token}` } })).status;
  assert(before === 404, `before accepting walt gets ${before}, not 404`);
  const wctx = await phone(browser);
  await loginContext(wctx, "walt");
  const waltPage = await wctx.newPage();
  await waltPage.goto(`${URL_BASE}/#/`);
  await waitFor("walt's invitation", 10000, () => waltPage.evaluate((id) => !!document.querySelector(`#invitations li[data-offer="${id}"]`), session.id));
  assert(await waltPage.evaluate(() => document.querySelectorAll(".session-card").length === 0), "no session before accepting");
  await shot(waltPage, "list-invitations");
  await waltPage.click("#invitations .offer-accept");
  await waitFor("the session on walt's list", 10000, () => waltPage.evaluate((id) => !!document.querySelector(`.session-card[data-session="${id}"]`), session.id));
  assert(await waltPage.evaluate(() => document.getElementById("invitations").hidden), "no invitation left");
  await wctx.close();
  const waltView = await api(`/sessions/${session.id}`, {}, URL_BASE, walt.access_token);
  assert(waltView.role === "controller", `walt's role: ${waltView.role}`);

  // vera opens the link: logs in, joins, lands on the session as a viewer.
  await addUser("vera");
  const vctx = await phone(browser);
  const vera = await vctx.newPage();
  await vera.goto(link);
  await waitFor("the login page first", 10000, () => vera.evaluate(() => location.hash === "#/login"));
  await loginForm(vera, "vera");
  await waitFor("the session after joining", 15000, () => vera.evaluate((id) => location.hash === `#/s/${id}`, session.id));
  await vera.waitForFunction(() => window.__moor !== undefined);
  await waitFor("the read-only note", 20000, () => vera.evaluate(() => !!document.getElementById("readonly-note")));
  await waitBanner(vera, "bridge", "online", 20000);
  assert(
    await vera.evaluate(() => !document.querySelector("#composer") && !document.querySelector("button.approve, button.deny") && document.getElementById("share-btn").hidden),
    "a viewer has no composer, no Approve/Deny and no Share",
  );
  await shot(vera, "session-real-viewer");
  // A forged input from the viewer's page, with its cookies: the server refuses it.
  const forged = await vera.evaluate(async (id) => {
    const res = await fetch(`/api/v1/sessions/${id}/inputs`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ client_msg_id: "forged-1", kind: "input.text", payload: { text: "rm -rf ~" } }),
    });
    return res.status;
  }, session.id);
  assert(forged === 403, `forged input answered ${forged}, not 403`);
  assert(!(await allEntries(session.id)).some((e) => e.payload?.text === "rm -rf ~"), "nothing forged reached the log");
  // A fresh page of olive's: its dialog lists, from the server, the link made above (vera spent
  // one of its two uses) and the people: admin (whose bridge attached it) and olive, walt by
  // name (his offer accepted), vera through the link.
  const fresh = await octx.newPage();
  await fresh.goto(`${URL_BASE}/#/s/${session.id}`);
  await fresh.waitForFunction(() => window.__moor !== undefined);
  await waitFor("Share in the fresh page", 20000, () => fresh.evaluate(() => !document.getElementById("share-btn").hidden));
  await fresh.click("#share-btn");
  const lists = () =>
    fresh.evaluate(() => ({
      links: [...document.querySelectorAll("#share-links li")].map((li) => ({ role: li.dataset.role, left: li.dataset.usesLeft, text: li.textContent })),
      members: Object.fromEntries([...document.querySelectorAll("#share-members li")].map((li) => [li.dataset.member, li.dataset.role])),
    }));
  await waitFor("the link and the members listed", 10000, async () => {
    const { links, members } = await lists();
    return links.length === 1 && members.vera === "viewer";
  });
  const listed = await lists();
  assert(listed.links[0].role === "viewer" && listed.links[0].left === "1", `the link: ${JSON.stringify(listed.links)}`);
  assert(/1 of 2 uses left/.test(listed.links[0].text), `uses left shown: ${listed.links[0].text}`);
  assert(
    JSON.stringify(listed.members) === JSON.stringify({ admin: "owner", olive: "owner", vera: "viewer", walt: "controller" }),
    `the members: ${JSON.stringify(listed.members)}`,
  );
  await shot(fresh, "sheet-share-lists");
  // A role changed from the list: walt is a viewer now, for the server too.
  await fresh.selectOption("#member-role-walt", "viewer");
  await waitFor("walt listed as a viewer", 10000, async () => (await lists()).members.walt === "viewer");
  const waltNow = await api(`/sessions/${session.id}`, {}, URL_BASE, walt.access_token);
  assert(waltNow.role === "viewer", `walt's role after the change: ${waltNow.role}`);
  // Removed from the list: walt no longer sees the session.
  await fresh.click('#share-members li[data-member="walt"] .member-remove');
  await waitFor("walt gone from the list", 10000, async () => !("walt" in (await lists()).members));
  const waltGone = (await fetch(`${URL_BASE}/api/v1/sessions/${session.id}`, { headers: { Authorization: `Bearer ${walt.access_token}` } })).status;
  assert(waltGone === 404, `after being removed walt gets ${waltGone}, not 404`);
  // olive revokes the link from the list: it is gone, vera with it, and vera loses the session.
  await fresh.click("#share-links li button");
  await waitFor("the link and vera gone from the lists", 10000, async () => {
    const { links, members } = await lists();
    return links.length === 0 && !("vera" in members);
  });
  const gone = await vera.evaluate(async (id) => (await fetch(`/api/v1/sessions/${id}`)).status, session.id);
  assert(gone === 404, `after the revocation vera gets ${gone}, not 404`);
  await octx.close();
  await vctx.close();
});

scenario("an access token expiring mid-watch is refreshed by the page: no login, no gap", async ({ browser }) => {
  const base = SHORT.url;
  await addUser("tim", base, SHORT.token);
  // About five token lifetimes of output; the server also ends SSE streams every 2 s, so the page
  // reconnects again and again with expired tokens. The agent ends only after one input, sent
  // once the page has refreshed twice: on a slow machine the login can take longer than the
  // output, and the page must still watch across expiries.
  const lines = 5 * SHORT.ttlSecs * 50;
  await rpc("lines", { server: "short", session: "web-ttl", count: lines, interval_ms: 20, echo_inputs: 1 });
  const info = await sessionByName("web-ttl", 20000, base, SHORT.token);
  await share(info.id, "tim", "viewer", base, SHORT.token);
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  const refreshes = [];
  page.on("response", (r) => {
    if (r.url().endsWith("/api/v1/auth/refresh")) refreshes.push(r.status());
  });
  await page.addInitScript(() => {
    window.__routes = [];
    window.addEventListener("hashchange", () => window.__routes.push(location.hash));
  });
  await page.goto(`${base}/#/login`);
  await loginForm(page, "tim");
  await waitFor("the list", 10000, () => page.evaluate(() => location.hash === "#/"));
  await page.goto(`${base}/#/s/${info.id}`);
  await page.waitForFunction(() => window.__moor !== undefined);
  await waitFor("two token refreshes", 60000, () => refreshes.length >= 2);
  await shortApi(`/sessions/${info.id}/inputs`, {
    method: "POST",
    body: JSON.stringify({ client_msg_id: "ttl-end", kind: "input.text", payload: { text: "done" } }),
  });
  await untilEnded(page, info.id, shortApi);
  const routes = await page.evaluate(() => window.__routes);
  assert(!routes.includes("#/login"), `the page never asked for a login: ${routes}`);
  assert(refreshes.every((s) => s === 200), `the page refreshed its token (${refreshes})`);
  // The input's echo lands somewhere among the numbered lines.
  const said = (await allEntries(info.id, base, SHORT.token)).filter((e) => e.kind === "agent.output").map((e) => e.payload.text);
  const at = said.indexOf("got: done");
  assert(at >= 0 && said.lastIndexOf("got: done") === at, `the input echoed once (${at})`);
  const counted = [...said.slice(0, at), ...said.slice(at + 1)];
  assert(JSON.stringify(counted) === JSON.stringify(numbered(lines)), "the agent's numbered lines, each once, in order");
  await assertExact(page, info.id, said, base, SHORT.token);
  await ctx.close();
});

scenario("too many wrong passwords: the login page says when to try again (429, Retry-After)", async ({ browser }) => {
  // On the short-token server, so the address-wide throttle does not slow the other scenarios.
  await addUser("tess", SHORT.url, SHORT.token);
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(`${SHORT.url}/#/login`);
  const text = await waitFor("the throttle message", 30000, async () => {
    await loginForm(page, "tess", "wrong password");
    await page.waitForFunction(() => !document.getElementById("login-error").hidden && !document.getElementById("login-submit").disabled);
    const t = await page.evaluate(() => document.getElementById("login-error").textContent);
    return /try again in \d+ s/.test(t) ? t : null;
  });
  assert(/^Too many attempts: try again in \d+ s\.$/.test(text), `message: ${text}`);
  await shot(page, "login-throttled");
  await ctx.close();
});

scenario("device login: the real moor login is approved in the page, then streams a session", async ({ browser }) => {
  await addUser("dana");
  const { code, link } = await rpc("moor_login");
  assert(link.includes(`#/device&code=${code}`), `moor shows the page's link with its code: ${link}`);
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await page.goto(link);
  await waitFor("the login page first", 10000, () => page.evaluate(() => location.hash === "#/login"));
  await loginForm(page, "dana");
  await waitFor("the approval page, code filled in", 10000, () => page.evaluate((c) => document.getElementById("device-code")?.value === c, code));
  await shot(page, "device-approve");
  await page.click("#device-approve");
  await waitFor("approved", 10000, () => page.evaluate(() => document.getElementById("device-result")?.dataset.result === "approved"));
  const done = await rpc("moor_login_done");
  assert(done.success, "moor login finished once approved");
  await rpc("device_lines", { session: "web-device", count: 50, interval_ms: 10 });
  await page.goto(`${URL_BASE}/#/`);
  await waitFor("dana's device session in her list", 20000, () => page.evaluate(() => [...document.querySelectorAll(".session-card b")].some((b) => b.textContent === "web-device")));
  const info = await sessionByName("web-device");
  assert(info.role === "owner", "the admin sees the session too");
  await page.click(`.session-card[data-session="${info.id}"]`);
  await page.waitForFunction(() => window.__moor !== undefined);
  const head = await untilEnded(page, info.id);
  // The rows are drawn on the next animation frame after the entries arrive.
  await waitFor("the rows drawn", 5000, () => page.evaluate((h) => window.__moor.renderedSeqs().includes(h), head));
  await shot(page, "session-device");
  await assertExact(page, info.id, numbered(50));
  await ctx.close();
});

scenario("the session's Notify switch mutes it for me, is shown off after a reload, and on again unmutes it", async ({ browser }) => {
  await rpc("echo", { session: "web-mute" });
  const info = await sessionByName("web-mute");
  const muted = async () => ((await api("/notify/mutes")).sessions ?? []).includes(info.id);
  assert(!(await muted()), "not muted to begin with");
  const ctx = await phone(browser);
  const page = await ctx.newPage();
  await openSession(page, info.id);
  await page.waitForSelector("#session-notify", { timeout: 10000 });
  assert(await page.isChecked("#session-notify"), "the switch is on");
  await page.click("#session-notify");
  await waitFor("the session muted on the server", 10000, muted);
  await page.reload();
  await page.waitForSelector("#session-notify", { timeout: 10000 });
  assert(!(await page.isChecked("#session-notify")), "after a reload, the switch says what moord stored: off");
  await page.click("#session-notify");
  await waitFor("the session unmuted on the server", 10000, async () => !(await muted()));
  await ctx.close();
});

scenario("a Web Push from moord reaches the service worker (CDP), shows Approve/Deny, and its Approve resolves the real Claude Code request; a second Approve is refused as stale", async ({ browser }) => {
  const { project } = await rpc("claude", { session: "web-push" });
  const info = await sessionByName("web-push");
  await addUser("pia");
  await share(info.id, "pia", "controller");
  await rpc("push_subscribe", { user: "pia", password: PASSWORD });
  const ctx = await phone(browser);
  await ctx.grantPermissions(["notifications"], { origin: URL_BASE });
  await loginContext(ctx, "pia");
  const page = await ctx.newPage();
  await page.goto(`${URL_BASE}/#/s/${info.id}`);
  await page.waitForFunction(() => window.__moor !== undefined);
  await waitFor("the service worker in control", 20000, () => page.evaluate(() => !!navigator.serviceWorker?.controller));
  // The registration's id, for delivering pushes to it as the push service would.
  const cdp = await ctx.newCDPSession(page);
  const registrations = new Map();
  cdp.on("ServiceWorker.workerRegistrationUpdated", ({ registrations: rs }) => {
    for (const r of rs) if (!r.isDeleted) registrations.set(r.scopeURL, r.registrationId);
  });
  await cdp.send("ServiceWorker.enable");
  const registrationId = await waitFor("the registration", 10000, () => registrations.get(`${URL_BASE}/`));
  const deliver = (message) => cdp.send("ServiceWorker.deliverPushMessage", { origin: URL_BASE, registrationId, data: JSON.stringify(message) });
  // Delivers `message` and waits for `seen` to hold. A push service delivers again until the
  // browser takes a message; so does this one, once, when `seen` does not hold 5 s after the
  // first delivery (on a loaded machine a delivery to a worker that was starting was lost).
  const deliverUntil = async (what, message, seen) => {
    await deliver(message);
    let again = Date.now() + 5000;
    return waitFor(what, 30000, async () => {
      const result = await seen();
      if (result) return result;
      if (Date.now() > again) {
        again = Infinity;
        await deliver(message);
      }
      return null;
    });
  };
  const shown = (tag) => page.evaluate(async (tag) => {
    const reg = await navigator.serviceWorker.ready;
    return (await reg.getNotifications({ tag })).map((n) => ({ title: n.title, body: n.body, actions: n.actions.map((a) => a.action), data: n.data }));
  }, tag);
  // What a tap on a notification's button runs in the service worker (headless Chromium has no
  // notification centre to tap): the same function its notificationclick listener calls.
  const press = (tag, action) => waitFor("the service worker", 5000, () => ctx.serviceWorkers()[0]).then((sw) => sw.evaluate(async ({ tag, action }) => {
    const [n] = await self.registration.getNotifications({ tag });
    if (!n) throw new Error(`no notification ${tag}`);
    await onNotificationClick(n, action);
  }, { tag, action }));

  // a real permission request; moord's push for it, decrypted by the local push service
  await page.fill("#composer-text", `[[bash:touch ${project}/pushed.txt]]`);
  await page.click("#composer button.send");
  const request = await waitFor("the permission request", 60000, async () =>
    (await allEntries(info.id)).find((e) => e.kind === "agent.permission.request"));
  const rid = request.payload.request_id;
  const message = await rpc("push_wait", { user: "pia", request_id: rid });
  assert(message.class === "permission" && message.actions.join() === "approve,deny" && !message.private, `the push: ${JSON.stringify(message)}`);

  // delivered to the service worker: shown with its buttons
  const [n] = await deliverUntil("the notification", message, async () => { const l = await shown(message.tag); return l.length ? l : null; });
  assert(n.title === message.title && /pushed\.txt/.test(n.body) && n.actions.join() === "approve,deny", `shown: ${JSON.stringify(n)}`);

  // Approve in the notification: the real request is allowed by pia, the tool runs
  await press(message.tag, "approve");
  await waitFor("the request approved", 60000, async () =>
    (await allEntries(info.id)).some((e) => e.kind === "agent.permission.resolved" && e.payload.request_id === rid && e.payload.decision === "allow" && e.payload.by === "user:pia"));
  await waitFor("the tool to finish", 60000, async () =>
    (await allEntries(info.id)).some((e) => e.kind === "agent.tool_result" && !e.payload.is_error));
  const [receipt] = await waitFor("the receipt", 10000, async () => { const l = await shown(message.tag); return l.length ? l : null; });
  assert(/^Approved: /.test(receipt.title) && receipt.actions.length === 0, `receipt: ${JSON.stringify(receipt)}`);

  // the same push again (another notification of the same request): its Approve is refused
  await deliverUntil("the second notification", message, async () => (await shown(message.tag)).some((x) => x.actions.length === 2));
  await press(message.tag, "approve");
  const [stale] = await waitFor("the refusal", 10000, async () => { const l = (await shown(message.tag)).filter((x) => /^Not sent: /.test(x.title)); return l.length ? l : null; });
  assert(/no longer pending/.test(stale.body), `stale: ${JSON.stringify(stale)}`);
  const decisions = (await allEntries(info.id)).filter((e) => e.kind === "input.permission");
  assert(decisions.length === 1, `one decision stored: ${decisions.length}`);

  // the retraction moord sends once the request is answered closes it on this device
  const retraction = await rpc("push_wait", { user: "pia", request_id: rid, close: true });
  await deliverUntil("the notification closed", retraction, async () => (await shown(message.tag)).length === 0);

  // privacy mode: ids only; the service worker asks moord for the words, as pia
  const privy = { ...message, tag: `private:${rid}`, title: "", body: "", private: true, actions: [] };
  const [p] = await deliverUntil("the private notification", privy, async () => { const l = await shown(privy.tag); return l.length ? l : null; });
  assert(p.title === message.title && p.body === n.body, `private one shown with the server's words: ${JSON.stringify(p)}`);
  await ctx.close();
});

scenario("quiet hours set on the list page are stored in this browser's time zone, shown again after a reload, and removed when switched off", async ({ browser }) => {
  const stored = async () => {
    try {
      return await api("/notify/quiet-hours");
    } catch (e) {
      if (e.status === 404) return null;
      throw e;
    }
  };
  assert((await stored()) === null, "no quiet hours to begin with");
  const ctx = await phone(browser, { timezoneId: "Asia/Tokyo" });
  const page = await ctx.newPage();
  // the page's first load of its quiet hours is held until the user has set them, as on a
  // slow network: its late "none" must not switch them off again
  const sent = [];
  let release;
  const held = new Promise((r) => (release = r));
  await page.route("**/api/v1/notify/quiet-hours", async (route) => {
    sent.push(route.request().method());
    if (sent.length === 1) await held;
    await route.continue();
  });
  await page.goto(`${URL_BASE}/#token=${TOKEN}`);
  await page.click("details.notify-quiet summary", { timeout: 10000 });
  await page.fill("#quiet-start", "23:15");
  await page.fill("#quiet-end", "06:45");
  await page.check("#quiet-on");
  const want = JSON.stringify({ start: "23:15", end: "06:45", time_zone: "Asia/Tokyo" });
  await waitFor("the quiet hours stored in the browser's time zone", 10000, async () => JSON.stringify(await stored()) === want);
  assert(sent.join() === "GET,PUT", `moving the times while off stores nothing; one save when switched on: ${sent.join()}`);
  release();
  await page.waitForSelector("details.notify-quiet[data-loaded]", { state: "attached", timeout: 10000 });
  assert(await page.isChecked("#quiet-on"), "the late first load left the switch on");
  await page.unroute("**/api/v1/notify/quiet-hours");
  await page.reload();
  await page.click("details.notify-quiet summary", { timeout: 10000 });
  await waitFor("the switch shown on after a reload", 10000, () => page.isChecked("#quiet-on"));
  assert((await page.inputValue("#quiet-start")) === "23:15", "the stored start is shown");
  assert((await page.textContent("#quiet-note")).includes("Asia/Tokyo"), "the note names the time zone");
  await page.uncheck("#quiet-on");
  await waitFor("the quiet hours removed", 10000, async () => (await stored()) === null);
  await ctx.close();
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

scenario("a page without credentials shows the login, where the admin token still opens the session", async ({ browser }) => {
  const id = (await api("/sessions/web-reload")).id;
  for (const scheme of ["light", "dark"]) {
    const ctx = await phone(browser, { colorScheme: scheme });
    const page = await ctx.newPage();
    await page.goto(`${URL_BASE}/#/s/${id}`);
    await page.waitForSelector("#login-form", { timeout: 10000 });
    await shot(page, `login-${scheme}`);
    if (scheme === "dark") {
      await page.click(".token-alt summary");
      await page.fill("#token-input", TOKEN);
      await page.click(".token-form button");
      await page.waitForFunction(() => window.__moor && window.__moor.renderedSeqs().length > 0, null, { timeout: 10000 });
    }
    await ctx.close();
  }
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
// MOOR_WEB_ONLY=<regex> runs the matching scenarios only (while working on one; some scenarios
// use sessions earlier ones made).
const only = process.env.MOOR_WEB_ONLY ? new RegExp(process.env.MOOR_WEB_ONLY) : null;
await runScenarios("browser", scenarios, await launch(), only && ((name) => only.test(name)));
