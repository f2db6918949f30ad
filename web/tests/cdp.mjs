// A Chromium driven over the bare DevTools protocol, for the one thing playwright cannot do:
// freeze a page. Playwright keeps every page it drives focused (focus emulation), and a page kept
// focused stays visible and awake, so `Page.setWebLifecycleState {state: "frozen"}` does nothing
// to it. Pages opened here get no such emulation: frozen, they run no timer and no script, as on
// a phone asleep or in a tab Chromium is about to discard. The pages offer the small part of
// playwright's Page the scenarios use (goto, evaluate, screenshot, close) plus freeze/wake and
// the requests they make.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PHONE, waitFor } from "./lib.mjs";

// Node 22 has a WebSocket; Node 20 gets the `ws` that playwright-core bundles.
const WebSocketImpl = globalThis.WebSocket ?? createRequire(import.meta.url)("playwright-core/lib/utilsBundle").ws;

class Connection {
  constructor(url) {
    this.ws = new WebSocketImpl(url);
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = new Map();
    this.ws.onmessage = (ev) => {
      const msg = JSON.parse(typeof ev.data === "string" ? ev.data : ev.data.toString());
      if (msg.id !== undefined) {
        const p = this.pending.get(msg.id);
        this.pending.delete(msg.id);
        if (msg.error) p?.reject(new Error(`${p.method}: ${msg.error.message}`));
        else p?.resolve(msg.result);
      } else {
        for (const fn of this.listeners.get(msg.method) ?? []) fn(msg.params);
      }
    };
    this.opened = new Promise((resolve, reject) => {
      this.ws.onopen = resolve;
      this.ws.onerror = (e) => reject(new Error(`DevTools socket: ${e.message ?? e}`));
    });
  }

  /** A DevTools call; one unanswered for 30 s fails (a guard, so a hung browser fails the run). */
  send(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`DevTools ${method}: no answer in 30 s`));
      }, 30000);
      const settle = (f) => (v) => {
        clearTimeout(timer);
        f(v);
      };
      this.pending.set(id, { resolve: settle(resolve), reject: settle(reject), method });
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  on(method, fn) {
    if (!this.listeners.has(method)) this.listeners.set(method, []);
    this.listeners.get(method).push(fn);
  }

  close() {
    this.ws.close();
  }
}

/** A page of the bare Chromium, at phone size. */
class RawPage {
  constructor(browser, targetId, conn) {
    this.browser = browser;
    this.targetId = targetId;
    this.conn = conn;
    this.requests = [];
    this.responses = [];
  }

  async init(initScript) {
    const c = this.conn;
    await c.send("Page.enable");
    await c.send("Runtime.enable");
    await c.send("Network.enable");
    await c.send("Emulation.setDeviceMetricsOverride", { ...PHONE, deviceScaleFactor: 2, mobile: true });
    if (initScript) await c.send("Page.addScriptToEvaluateOnNewDocument", { source: `(${initScript})()` });
    const urls = new Map();
    c.on("Network.requestWillBeSent", (p) => {
      this.requests.push(p.request.url);
      urls.set(p.requestId, p.request.url);
    });
    c.on("Network.loadingFinished", async (p) => {
      const url = urls.get(p.requestId);
      if (!url || !/\/api\/v1\/sessions\/[^/]+\/entries\?/.test(url)) return;
      const body = await c.send("Network.getResponseBody", { requestId: p.requestId }).catch(() => null);
      if (body) this.responses.push({ url, json: JSON.parse(body.base64Encoded ? Buffer.from(body.body, "base64").toString() : body.body) });
    });
  }

  async goto(url) {
    await this.conn.send("Page.navigate", { url });
    await waitFor(`${url} to load`, 20000, () => this.evaluate(() => document.readyState === "complete"));
  }

  /** Runs `fn(arg)` in the page (awaiting a promise it returns); the result comes back as JSON. */
  async evaluate(fn, arg) {
    const r = await this.conn.send("Runtime.evaluate", {
      expression: `(${fn})(${arg === undefined ? "" : JSON.stringify(arg)})`,
      awaitPromise: true,
      returnByValue: true,
    });
    if (r.exceptionDetails) throw new Error(r.exceptionDetails.exception?.description ?? r.exceptionDetails.text);
    return r.result.value;
  }

  async screenshot({ path }) {
    const { data } = await this.conn.send("Page.captureScreenshot", { format: "png" });
    writeFileSync(path, Buffer.from(data, "base64"));
  }

  /** The Page Lifecycle's frozen state (hidden first, as a phone's screen goes off): no task
   * runs until `wake`. */
  async freeze() {
    if (this.shown) {
      await this.conn.send("Emulation.setFocusEmulationEnabled", { enabled: false });
      // A page that still counts as shown ignores the freeze: wait until it has seen itself
      // hidden (its visibilitychange handlers have run) before freezing it.
      await waitFor("the page to be hidden", 10000, () => this.evaluate(() => document.visibilityState === "hidden"));
    }
    this.shown = false;
    await this.conn.send("Page.setWebLifecycleState", { state: "frozen" });
  }

  /** Active again, then visible (the screen back on). */
  async wake() {
    await this.conn.send("Page.setWebLifecycleState", { state: "active" });
    await this.conn.send("Emulation.setFocusEmulationEnabled", { enabled: true });
    this.shown = true;
  }

  /**
   * Drops the tab the way Chromium discards one: its renderer goes away (here, crashed on
   * purpose) without running another line of the page, no pagehide, no unload; then the tab
   * closes.
   */
  async discard() {
    const gone = new Promise((resolve) => this.conn.on("Inspector.targetCrashed", resolve));
    await this.conn.send("Inspector.enable");
    // The crash takes the renderer down before it can answer.
    void this.conn.send("Page.crash").catch(() => {});
    await waitFor("the tab's renderer to go", 10000, () => Promise.race([gone.then(() => true), new Promise((r) => setTimeout(() => r(false), 100))]));
    await this.close();
  }

  /** Closes the tab from the browser's side (no unload handler is waited for). */
  async close() {
    await this.browser.conn.send("Target.closeTarget", { targetId: this.targetId });
    this.conn.close();
  }
}

/** Starts a bare headless Chromium with a fresh profile (storage shared by its pages). */
export async function rawChromium() {
  const dir = mkdtempSync(join(tmpdir(), "moor-raw-chromium-"));
  const child = spawn(
    process.env.MOOR_CHROMIUM ?? "/usr/bin/chromium",
    ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run", "--remote-debugging-port=0", `--user-data-dir=${dir}`, "about:blank"],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const wsUrl = await new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error(`chromium did not start: ${err}`)), 20000);
    child.stderr.on("data", (d) => {
      err += d;
      const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`chromium exited (${code}): ${err}`)));
  });
  const conn = new Connection(wsUrl);
  await conn.opened;
  const base = new URL(wsUrl);
  const browser = {
    conn,
    /** A new tab in its own window; `initScript` runs in every document it loads. */
    async newPage(initScript) {
      const { targetId } = await conn.send("Target.createTarget", { url: "about:blank", newWindow: true });
      const pc = new Connection(`ws://${base.host}/devtools/page/${targetId}`);
      await pc.opened;
      const page = new RawPage(browser, targetId, pc);
      await page.init(initScript);
      return page;
    },
    async close() {
      await conn.send("Browser.close").catch(() => {});
      conn.close();
      await new Promise((r) => (child.exitCode !== null ? r() : child.on("exit", r)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return browser;
}
