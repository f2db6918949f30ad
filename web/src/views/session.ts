// The session view: banners that tell the truth about the page's stream and the agent's bridge,
// the transcript (virtualised) or a terminal, the pending-input strip and the composer.

import { api, ApiError, canControl, type Role } from "../api";
import { clock, h, themeButton } from "../dom";
import { payloadOf, typed, type InputKind, type PayloadOf } from "../entries";
import { ItemModel } from "../items";
import type { Outbox, OutboxRecord } from "../outbox";
import type { Entry } from "../protocol/Entry";
import type { SessionInfo } from "../protocol/SessionInfo";
import type { SessionState } from "../protocol/SessionState";
import { LiveStream, watchdogFor, type StreamStatus } from "../stream";
import { VirtualList } from "../virtual";
import { EntryWindow, GapError } from "../window";
import { renderItem, type RenderCtx } from "./render";
import { phaseText } from "../phase";
import { checkpointsPanel, exportPanel, recoveryPanel, sharePanel, sheet, statePanel } from "./sheets";
import type { Terminal } from "./terminal";

/** Entries loaded around the cursor when the view opens, and per page when scrolling up. */
export const PAGE = 200;
/** A stored cursor further behind the head than this is not replayed: the view opens at the head. */
export const MAX_REPLAY = 5000;
/** How long "back, k missed entries replayed" stays up before the banner says "live". */
const BACK_NOTICE_MS = 10000;

const cursorKey = (id: string) => `moor.cursor.${id}`;

export interface SessionDeps {
  outbox: Outbox;
  keepaliveMs: number;
  /** The session's info, if the page already asked for it. */
  early?: Promise<SessionInfo | null>;
}

/** Test and benchmark hooks (window.__moor). */
export interface SessionProbe {
  /** The session this view shows. */
  id: string;
  seqs(): number[];
  /** Texts of the `agent.output` entries held, in order. */
  lines(): string[];
  hi(): number;
  lo(): number;
  hasOlder(): boolean;
  loadOlder(): Promise<boolean>;
  status(): StreamStatus;
  renderedSeqs(): number[];
  /** A render of the transcript is scheduled (the DOM lags the model until the next frame). */
  rendering(): boolean;
}

export function sessionView(root: HTMLElement, id: string, deps: SessionDeps): () => void {
  const win = new EntryWindow(0);
  const model = new ItemModel();
  // The caller's role arrives with the session's info; until then nothing offers control.
  let role: Role | null = null;
  let control = false;
  let info: SessionInfo | null = null;
  let state: SessionState | null = null;
  let status: StreamStatus = { kind: "connecting" };
  let bridge = { online: false, since: null as number | null, reason: null as string | null, at: -1, known: false };
  let ended = false;
  let backUntil = 0;
  let term: Terminal | null = null;
  const deciding = new Map<string, string>();

  // ---- layout
  const title = h("h1.title", null, "…");
  const streamBanner = h("div.banner", { id: "stream-banner", role: "status", "aria-live": "polite" });
  const bridgeBanner = h("div.banner", { id: "bridge-banner", role: "status", "aria-live": "polite" });
  const recoveryBar = h("div.banner.bad", { id: "recovery-bar", hidden: true });
  const scroller = h("div.scroller", { id: "transcript" });
  const termBox = h("div.term", { id: "terminal", hidden: true });
  const pending = h("div.pending", { id: "pending" });
  const jump = h("button.jump", { type: "button", hidden: true, onclick: () => vl.scrollToBottom() }, "↓ newest");
  const text = h("textarea", { id: "composer-text", rows: 1, placeholder: "Message the agent", autocomplete: "off", enterkeyhint: "send" }) as HTMLTextAreaElement;
  const composer = h(
    "form.composer",
    { id: "composer" },
    text,
    h("button.send", { type: "submit", "aria-label": "Send" }, "Send"),
  );
  const interrupt = h("button.icon", { type: "button", title: "Interrupt the agent", hidden: true, onclick: () => void send("input.interrupt", {}) }, "■");
  const header = h(
    "header.top",
    null,
    h("div.row", null, h("a.icon", { href: "#/", "aria-label": "Sessions" }, "‹"), title, h("div.spacer"), themeButton()),
    h(
      "div.row.tools",
      null,
      h("button.tb", { type: "button", id: "state-btn", onclick: () => openState() }, "State"),
      h("button.tb", { type: "button", id: "checkpoints-btn", onclick: () => void openCheckpoints() }, "Checkpoints"),
      h("button.tb", { type: "button", id: "share-btn", hidden: true, onclick: () => openShare() }, "Share"),
      h("button.tb", { type: "button", id: "export-btn", onclick: () => openExport() }, "Export"),
    ),
    streamBanner,
    bridgeBanner,
    recoveryBar,
  );
  const main = h("main.session", null, scroller, termBox, jump);
  const composeSlot = h("div.compose-slot");
  root.replaceChildren(header, main, h("footer.bottom", null, pending, composeSlot));
  const shareBtn = header.querySelector("#share-btn") as HTMLElement;

  // ---- transcript
  const ctx: RenderCtx = {
    canControl: false,
    deciding,
    decide: (requestId, decision) => {
      deciding.set(requestId, decision);
      bump((it) => it.t === "perm" && it.requestId === requestId);
      void send("input.permission", { request_id: requestId, decision });
    },
  };
  const vl = new VirtualList(scroller, {
    count: () => model.items.length,
    key: (i) => model.items[i].key,
    version: (i) => model.items[i].v,
    estimate: (i) => (model.items[i].t === "line" || model.items[i].t === "sys" ? 22 : 64),
    render: (i) => renderItem(model.items[i], ctx),
  });
  vl.onRendered = () => {
    jump.hidden = vl.stick;
  };
  let loadingOlder: Promise<boolean> | null = null;
  const loadOlder = (): Promise<boolean> => {
    if (loadingOlder) return loadingOlder;
    if (!win.hasOlder) return Promise.resolve(false);
    loadingOlder = (async () => {
      try {
        const before = win.lo;
        const page = await api.entriesBefore(id, before, PAGE);
        if (win.lo !== before) return false;
        const added = win.prepend(page.entries, page.has_more);
        if (!added.length) {
          win.hasOlder = false;
          return false;
        }
        const old = model.items.length;
        model.rebuild(win.entries);
        vl.prepended(model.items.length - old);
        if (term) term.reload(win.entries);
        return true;
      } finally {
        loadingOlder = null;
      }
    })();
    return loadingOlder;
  };
  vl.onNearTop = () => void loadOlder();

  function bump(pred: (it: (typeof model.items)[number]) => boolean): void {
    for (const it of model.items) if (pred(it)) it.v += 1;
    vl.changed();
  }

  // ---- banners
  const setBanner = (el: HTMLElement, cls: string, state: string, text: string) => {
    el.className = `banner ${cls}`;
    el.dataset.state = state;
    el.textContent = text;
  };
  const drawStream = () => {
    const s = status;
    switch (s.kind) {
      case "connecting":
        return setBanner(streamBanner, "warn", "connecting", "Connecting…");
      case "catching-up":
        return setBanner(streamBanner, "warn", "catching-up", `Catching up: ${s.got} of ${s.missed} missed entries`);
      case "reconnecting":
        return setBanner(streamBanner, "bad", "reconnecting", `Reconnecting, attempt ${s.attempt}: ${s.reason} (since ${clock(s.since)})`);
      case "stopped":
        return setBanner(streamBanner, "muted", "stopped", "Stopped");
      case "live":
        if (s.resumed && Date.now() < backUntil) {
          return setBanner(streamBanner, "ok", "back", `Back: ${s.replayed} missed ${s.replayed === 1 ? "entry" : "entries"} replayed`);
        }
        return setBanner(streamBanner, "ok", "live", "Live");
    }
  };
  const drawBridge = () => {
    if (ended) return setBanner(bridgeBanner, "muted", "ended", "Session ended");
    if (!bridge.known) return setBanner(bridgeBanner, "muted", "unknown", "Agent: no bridge has connected yet");
    if (bridge.online) return setBanner(bridgeBanner, "ok", "online", `Agent online${state ? ` · ${phaseText(state)}` : ""}`);
    const phase = state ? ` · last known: ${phaseText(state)}` : "";
    return setBanner(bridgeBanner, "bad", "offline", `Agent offline since ${clock(bridge.since)}${bridge.reason ? ` (${bridge.reason})` : ""}${phase}`);
  };
  const drawRecovery = () => {
    const interrupted = state?.phase === "interrupted";
    recoveryBar.hidden = !interrupted;
    if (interrupted) {
      recoveryBar.replaceChildren("The session was interrupted mid-work. ", h("button", { type: "button", id: "recovery-btn", onclick: () => openRecovery() }, "Recovery brief"));
    }
  };
  const backTimer = setInterval(() => {
    if (status.kind === "live" && backUntil && Date.now() >= backUntil) {
      backUntil = 0;
      drawStream();
    }
  }, 1000);

  const setBridge = (online: boolean, since: number | null, reason: string | null, at: number) => {
    if (at < bridge.at) return;
    bridge = { online, since, reason, at, known: since !== null || online };
    drawBridge();
  };

  // ---- pending inputs (not yet in the log)
  const drawPending = () => {
    const recs = deps.outbox.list(id).filter((r) => r.seq === null || r.seq > win.hi);
    pending.replaceChildren(...recs.map(pendingRow));
    pending.hidden = recs.length === 0;
  };
  const pendingRow = (r: OutboxRecord) => {
    const what = r.kind === "input.text" ? String((r.payload as PayloadOf<"input.text">).text ?? "") : r.kind;
    const state = r.error ? "refused" : r.seq === null ? "sending" : "queued";
    const label = r.error ? `refused: ${r.error}` : r.seq === null ? "waiting to send (kept on this device)" : "queued";
    return h(
      "div.bubble.user.pending-item",
      { "data-client-id": r.client_msg_id },
      h("div", null, what),
      h("div.meta", null, h(`span.receipt.r-${state}`, { "data-receipt": state }, label), r.error ? h("button.link", { type: "button", onclick: () => void deps.outbox.discard(r.client_msg_id) }, "discard") : null),
    );
  };
  const offOutbox = deps.outbox.onChange(drawPending);

  async function send<K extends InputKind>(kind: K, payload: PayloadOf<K>): Promise<void> {
    await deps.outbox.send(id, kind, payload);
  }
  composer.addEventListener("submit", (e) => {
    e.preventDefault();
    const t = text.value.trim();
    if (!t) return;
    text.value = "";
    void send("input.text", { text: t });
  });
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      composer.requestSubmit();
    }
  });

  // ---- sheets
  const openState = () => sheet("Session state").body.append(statePanel(state));
  const openCheckpoints = async () => {
    const s = sheet("Checkpoints");
    s.body.append(await checkpointsPanel(id, win.entries, state?.last_checkpoint ?? null));
  };
  const openShare = () => sheet("Share").body.append(sharePanel(id, info?.name ?? id));
  const openExport = () => sheet("Export").body.append(exportPanel(id, info?.name ?? id));

  /** Shows what the role allows: composer and Approve/Deny for controllers, Share for owners. */
  const applyRole = (r: Role) => {
    if (r === role) return;
    role = r;
    control = canControl(r);
    ctx.canControl = control;
    root.dataset.role = r;
    composeSlot.replaceChildren(
      control ? h("div.compose-row", null, composer, interrupt) : h("p.muted.readonly", { id: "readonly-note" }, "Read-only: you can watch this session."),
    );
    shareBtn.hidden = r !== "owner";
    bump((it) => it.t === "perm");
  };
  const openRecovery = async () => {
    const s = sheet("Recovery brief");
    s.body.append(
      await recoveryPanel(
        id,
        control
          ? (prompt) => {
              void send("input.text", { text: prompt });
              s.close();
            }
          : null,
      ),
    );
  };

  // ---- cursor persistence
  // The cursor is written in the same task that adds entries to the window (localStorage writes
  // are synchronous), before the render that shows them: whatever the page holds, its stored
  // cursor already covers. A discarded tab or a killed phone browser may run no further event
  // (no pagehide, no freeze), so no save waits for one.
  const saveCursor = () => {
    if (win.hi > 0) localStorage.setItem(cursorKey(id), String(win.hi));
  };

  // ---- live entries
  const onEntries = (batch: Entry[]) => {
    const added = win.append(batch);
    if (!added.length) return;
    saveCursor();
    for (const e of added) {
      const b = typed(e);
      if (b?.kind === "bridge.connected") setBridge(true, e.ts, null, e.seq);
      else if (b?.kind === "bridge.disconnected") setBridge(false, e.ts, b.payload.reason ?? null, e.seq);
      else if (b?.kind === "session.ended") {
        ended = true;
        drawBridge();
      }
    }
    if (term) term.write(added);
    model.apply(added);
    vl.appended();
    vl.changed();
    void deps.outbox.settle(id, win.hi);
    drawPending();
  };

  const stream = new LiveStream(
    id,
    {
      cursor: () => win.hi,
      onEntries,
      onState: (s) => {
        state = s;
        setBridge(s.link.up, s.link.since, s.link.reason, s.head);
        drawRecovery();
        drawBridge();
      },
      onInfo: (i) => {
        info = i;
        applyRole(i.role);
        title.textContent = i.name;
        document.title = `${i.name} · Mooring`;
        ended = i.status === "ended";
        setBridge(i.bridge.online, i.bridge.since, i.bridge.last_reason, i.head_seq);
        if (i.state) {
          state = i.state;
          drawRecovery();
        }
        deps.outbox.pump();
      },
      onReset: (r) => {
        // The server's log is not the one our cursor came from: start again at its head.
        localStorage.removeItem(cursorKey(id));
        void reanchor(r.head_seq);
      },
      onStatus: (s) => {
        if (s.kind === "live" && s.resumed && (status.kind === "catching-up" || status.kind === "reconnecting" || status.kind === "connecting")) {
          backUntil = Date.now() + BACK_NOTICE_MS;
        }
        status = s;
        drawStream();
        if (s.kind === "live") deps.outbox.pump();
      },
    },
    { watchdogMs: watchdogFor(deps.keepaliveMs) },
  );

  /** Starts the window at `head` (empty); the history below it is paged in like older pages. */
  function reanchor(head: number): Promise<boolean> {
    win.reset(head);
    model.rebuild(win.entries);
    vl.reset();
    term?.reload(win.entries);
    return loadOlder();
  }

  // ---- open
  let stopped = false;
  (async () => {
    drawStream();
    drawBridge();
    drawPending();
    let first: SessionInfo;
    try {
      first = (await deps.early) ?? (await api.session(id));
      performance.mark("moor:info");
    } catch (e) {
      setBanner(streamBanner, "bad", "error", `Cannot open this session: ${(e as Error).message}`);
      if (e instanceof ApiError && e.status === 401) {
        // No stream without credentials: the login page is on its way and comes back here.
        return;
      }
      // The stream loop retries (and says so) until the server answers.
      first = null as unknown as SessionInfo;
    }
    if (stopped) return;
    if (first) {
      applyRole(first.role);
      const head = first.head_seq;
      const stored = Number(localStorage.getItem(cursorKey(id)) ?? 0);
      const anchor = stored > 0 && stored <= head && head - stored <= MAX_REPLAY ? stored : head;
      if (first.agent?.adapter === "pty") {
        // xterm.js is loaded only for terminal sessions.
        const { Terminal } = await import("./terminal");
        term = new Terminal(termBox, control ? (kind, payload) => void send(kind, payload) : null);
        termBox.hidden = false;
        scroller.classList.add("under-term");
      }
      interrupt.hidden = first.agent?.adapter !== "claude";
      // Live entries and the history below them load at the same time.
      void reanchor(anchor).then(() => performance.mark("moor:history"));
    }
    stream.start(first ?? undefined);
  })().catch((e) => {
    if (e instanceof GapError) stream.restart(e.message);
  });

  const probe: SessionProbe = {
    id,
    seqs: () => win.entries.map((e) => e.seq),
    lines: () => win.entries.flatMap((e) => payloadOf(e, "agent.output") ?? []).map((p) => String(p.text)),
    hi: () => win.hi,
    lo: () => win.lo,
    hasOlder: () => win.hasOlder,
    loadOlder,
    status: () => status,
    renderedSeqs: () =>
      [...scroller.querySelectorAll<HTMLElement>(".item[data-seq]")]
        .map((el) => ({ seq: Number(el.dataset.seq), top: Number(/translateY\(([-\d.]+)px\)/.exec(el.style.transform)?.[1] ?? 0) }))
        .sort((a, b) => a.top - b.top)
        .map((x) => x.seq),
    rendering: () => vl.pending,
  };
  (window as unknown as { __moor: unknown }).__moor = probe;

  return () => {
    stopped = true;
    stream.stop();
    saveCursor();
    offOutbox();
    clearInterval(backTimer);
    term?.dispose();
  };
}
