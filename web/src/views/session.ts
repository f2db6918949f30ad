// The session view: banners that tell the truth about the page's stream and the agent's bridge,
// the transcript (virtualised) or a terminal, the pending-input strip and the composer.

import { api, ApiError, canControl, type Role } from "../api";
import { setTitle } from "../attention";
import { WINDOW_ENTRIES, WindowCache, type StoredWindow } from "../cache";
import { clock, h, themeButton } from "../dom";
import { Dictation, recognitionCtor } from "../dictation";
import { payloadOf, typed, type InputKind, type PayloadOf } from "../entries";
import { ItemModel, pendingDecision, type Item } from "../items";
import type { Outbox, OutboxRecord } from "../outbox";
import type { Compacted } from "../protocol/Compacted";
import type { Entry } from "../protocol/Entry";
import type { SessionInfo } from "../protocol/SessionInfo";
import type { SessionState } from "../protocol/SessionState";
import { LiveStream, watchdogFor, type StreamStatus } from "../stream";
import { VirtualList } from "../virtual";
import { EntryWindow, GapError, loadOlderPage } from "../window";
import { renderItem, type RenderCtx } from "./render";
import { markTurnsSeen } from "../needs";
import { phaseText } from "../phase";
import { describe, initial, reduce, type AgentSeen, type StatusEvent } from "../status";
import { sessionMuteSwitch } from "./notify";
import { sessionChanges, turnAt, turnLink, turnsOf, type Turn } from "./review";
import { checkpointsPanel, exportPanel, recoveryPanel, sharePanel, sheet, statePanel } from "./sheets";
import type { Terminal } from "./terminal";

/** Entries loaded around the cursor when the view opens, and per page when scrolling up. */
export const PAGE = 200;
/** A stored cursor further behind the head than this is not replayed: the view opens at the head. */
export const MAX_REPLAY = 5000;
/** How long "back, k missed entries replayed" stays up before the banner says "live". */
const BACK_NOTICE_MS = 10000;
/** While the bridge reports entries waiting on its machine, the session's info is asked this often. */
const SPOOL_ASK_MS = 5000;

const cursorKey = (id: string) => `moor.cursor.${id}`;
/** Whether keystroke bursts are hidden from PTY transcripts on this device ("1"). */
const HIDE_KEYS = "moor.hide-keys";
/** The session's info and state are stored at most this often (entries as they come). */
const META_SAVE_MS = 1000;

let cacheOpen: Promise<WindowCache | null> | null = null;
/** The device's store of session windows (opened once per page; null without IndexedDB). */
export function windowCache(): Promise<WindowCache | null> {
  cacheOpen ??= WindowCache.open();
  return cacheOpen;
}

export interface SessionDeps {
  outbox: Outbox;
  keepaliveMs: number;
  /** The session's info, if the page already asked for it. */
  early?: Promise<SessionInfo | null>;
  /** The newest part of the window this device keeps of the session, if already asked for. */
  kept?: Promise<StoredWindow | null>;
}

/** The newest part of the window kept of `id` (PAGE entries): what a reload draws first. */
export function keptTail(id: string): Promise<StoredWindow | null> {
  return windowCache()
    .then((c) => c?.loadTail(id, PAGE) ?? null)
    .catch(() => null);
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
  /** The texts of the transcript's input items, in order. */
  inputTexts(): string[];
  /** The same, of the items drawn (keystroke bursts may be hidden). */
  shownInputTexts(): string[];
  /** The newest seq this device keeps of the session in IndexedDB (0: none). */
  keptHi(): Promise<number>;
  /** How many entries this device keeps of the session. */
  keptCount(): Promise<number>;
  /** The text the terminal shows (PTY sessions), or null. */
  terminalText(): string | null;
}

/**
 * The microphone: dictation into `text` where the browser offers speech recognition, else
 * nothing. Recognised words land at the caret, to edit and send.
 */
function micButton(text: HTMLTextAreaElement): HTMLElement | null {
  const Ctor = recognitionCtor(window);
  if (!Ctor) return null;
  const d = new Dictation(Ctor, text);
  const btn = h("button.icon.mic", { type: "button", id: "mic", "aria-label": "Dictate", "aria-pressed": "false", title: "Dictate" }, "🎤");
  btn.addEventListener("click", () => d.toggle());
  d.onState = (s) => {
    btn.setAttribute("aria-pressed", String(s === "listening"));
    btn.classList.toggle("listening", s === "listening");
    btn.title = typeof s === "object" ? s.error : s === "listening" ? "Listening: tap to stop" : "Dictate";
    btn.dataset.state = typeof s === "object" ? "error" : s;
  };
  return btn;
}

/** Resolves once the next frame has been drawn (a task after it). */
const afterPaint = () => new Promise<void>((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));

export function sessionView(root: HTMLElement, id: string, deps: SessionDeps): () => void {
  const win = new EntryWindow(0);
  const model = new ItemModel();
  // The caller's role arrives with the session's info; until then nothing offers control.
  let role: Role | null = null;
  let control = false;
  let info: SessionInfo | null = null;
  let state: SessionState | null = null;
  let status: StreamStatus = { kind: "connecting" };
  // The three truths the banners tell (status.ts); `bridgeAt` orders the server's words on the
  // bridge by the seq they are as of.
  let truth = initial(navigator.onLine, Date.now());
  let bridgeAt = -1;
  /** What the server last said of the bridge, and the entries its spool holds (session info). */
  let agentSeen: AgentSeen | null = null;
  let spooled = 0;
  let spoolAskedAt = 0;
  /** A bridge (re)connected: ask once, SPOOL_ASK_MS later, whether its spool holds entries. */
  let spoolCheck = false;
  let ended = false;
  let backUntil = 0;
  let term: Terminal | null = null;
  let cache: WindowCache | null = null;
  /** The window has its starting point (stored, from the cursor, or the head). */
  let anchored = false;
  const deciding = new Map<string, string>();

  // ---- layout
  const title = h("h1.title", null, "…");
  const deviceBanner = h("div.banner", { id: "device-banner", role: "status", "aria-live": "polite", hidden: true });
  const endBar = h("div.banner.bad", { id: "end-bar", hidden: true });
  const streamBanner = h("div.banner", { id: "stream-banner", role: "status", "aria-live": "polite" });
  const bridgeBanner = h("div.banner", { id: "bridge-banner", role: "status", "aria-live": "polite" });
  const recoveryBar = h("div.banner.bad", { id: "recovery-bar", hidden: true });
  const scroller = h("div.scroller", { id: "transcript" });
  const termBox = h("div.term", { id: "terminal", hidden: true });
  const pending = h("div.pending", { id: "pending" });
  // The decision the agent waits for, within thumb reach above the composer.
  const decisionBar = h("div.decision-bar", { id: "decision-bar", hidden: true });
  const jump = h("button.jump", { type: "button", hidden: true, onclick: () => vl.scrollToBottom() }, "↓ newest");
  const text = h("textarea", { id: "composer-text", rows: 1, placeholder: "Message the agent", autocomplete: "off", enterkeyhint: "send" }) as HTMLTextAreaElement;
  const composer = h(
    "form.composer",
    { id: "composer" },
    text,
    micButton(text),
    h("button.send", { type: "submit", "aria-label": "Send" }, "Send"),
  );
  // "5 files changed": the review of the whole session, from the newest checkpoint.
  const changes = sessionChanges(id);
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
      changes.el,
      h("button.tb", { type: "button", id: "share-btn", hidden: true, onclick: () => openShare() }, "Share"),
      h("button.tb", { type: "button", id: "export-btn", onclick: () => openExport() }, "Export"),
      sessionMuteSwitch(id),
    ),
    deviceBanner,
    streamBanner,
    bridgeBanner,
    endBar,
    recoveryBar,
  );
  const main = h("main.session", null, scroller, termBox, jump);
  const composeSlot = h("div.compose-slot");
  root.replaceChildren(header, main, h("footer.bottom", null, decisionBar, pending, composeSlot));
  const shareBtn = header.querySelector("#share-btn") as HTMLElement;

  // ---- transcript
  // The items drawn: all of the model's, or all but keystroke bursts when those are hidden (a
  // PTY session's typing is in its terminal already).
  let hideKeys = localStorage.getItem(HIDE_KEYS) === "1";
  let shown: Item[] = model.items;
  const isKeys = (it: Item) => it.t === "input" && it.kind === "input.keys";
  /** Brings `shown` up to the model (items are only appended or rebuilt, so indexes hold). */
  const sync = () => {
    shown = hideKeys ? model.items.filter((it) => !isKeys(it)) : model.items;
  };
  const keysToggle = h("button.tb", { type: "button", id: "keys-toggle", hidden: true, onclick: () => setHideKeys(!hideKeys) });
  const drawKeysToggle = () => {
    keysToggle.setAttribute("aria-pressed", String(hideKeys));
    keysToggle.textContent = hideKeys ? "Show keystrokes" : "Hide keystrokes";
  };
  const setHideKeys = (on: boolean) => {
    hideKeys = on;
    localStorage.setItem(HIDE_KEYS, on ? "1" : "0");
    drawKeysToggle();
    sync();
    vl.reset();
  };
  drawKeysToggle();
  header.querySelector(".row.tools")?.append(keysToggle);
  /** The turns of the entries held and the checkpoints that bound them (review.ts). */
  let turns: { lo: number; hi: number; n: number; start: boolean; list: Turn[] } | null = null;
  const turnsHeld = (): Turn[] => {
    const start = win.fromLogStart;
    if (!turns || turns.lo !== win.lo || turns.hi !== win.hi || turns.n !== win.entries.length || turns.start !== start) {
      turns = { lo: win.lo, hi: win.hi, n: win.entries.length, start, list: turnsOf(win.entries, start) };
    }
    return turns.list;
  };
  const ctx: RenderCtx = {
    canControl: false,
    deciding,
    decide: (requestId, decision) => {
      deciding.set(requestId, decision);
      bump((it) => it.t === "perm" && it.requestId === requestId);
      void send("input.permission", { request_id: requestId, decision });
    },
    review: (seq) => {
      const t = turnAt(turnsHeld(), seq);
      return t ? turnLink(id, t) : null;
    },
  };
  const vl = new VirtualList(scroller, {
    count: () => shown.length,
    key: (i) => shown[i].key,
    version: (i) => shown[i].v,
    estimate: (i) => (shown[i].t === "line" || shown[i].t === "sys" ? 22 : 64),
    render: (i) => renderItem(shown[i], ctx),
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
        // What this device keeps below the first screen comes before any page from the server.
        if (keptRest) await keptRest;
        if (!win.hasOlder) return false;
        const got = await loadOlderPage(win, {
          before: (before) => api.entriesBefore(id, before, PAGE),
          mark: async () => (await api.entriesAfter(id, 0, 1)).compacted ?? null,
        });
        if (!got) return false;
        if (got.mark) learnCompacted(got.mark);
        const added = got.added;
        if (!added.length) {
          win.hasOlder = false;
          return false;
        }
        keep(added);
        redrawPrepended();
        return true;
      } finally {
        loadingOlder = null;
      }
    })();
    return loadingOlder;
  };
  vl.onNearTop = () => void loadOlder();

  /** Older entries were put in front of the window: the model, the list and the terminal follow. */
  function redrawPrepended(): void {
    const old = shown.length;
    model.rebuild(win.entries, win.below, win.compacted);
    sync();
    vl.prepended(shown.length - old);
    if (term) term.reload(win.entries, win.below, win.compacted);
  }

  /**
   * A compaction mark the server named: the window takes gaps up to it, the transcript and the
   * terminal say where output is missing, and the device keeps the mark with the window.
   */
  function learnCompacted(mark: Compacted): void {
    win.noteCompacted(mark);
    const changed = model.compact(mark);
    term?.compact(mark);
    saveMeta();
    if (!changed.size) return;
    sync();
    vl.appended();
    vl.changed();
  }

  /**
   * After the first screen of a restore: the rest of the kept window, read below it, unless the
   * window was started elsewhere meanwhile (re-anchored: those entries are no longer its past).
   */
  let keptRest: Promise<void> | null = null;
  let anchorGen = 0;
  function restoreRest(lo: number, have: number): void {
    const gen = anchorGen;
    keptRest = (async () => {
      // Not before the first screen is on it: reading thousands of rows would hold that frame.
      await afterPaint();
      const older = await (cache?.loadBefore(id, lo, WINDOW_ENTRIES - have, win.compacted) ?? Promise.resolve([]));
      if (stopped || gen !== anchorGen || win.lo !== lo || !older.length) return;
      if (win.prepend(older, true).length) redrawPrepended();
    })()
      .catch(() => {})
      .finally(() => {
        keptRest = null;
      });
  }

  function bump(pred: (it: (typeof model.items)[number]) => boolean): void {
    for (const it of model.items) if (pred(it)) it.v += 1;
    vl.changed();
    drawDecision();
  }

  /** The sticky bar: the oldest undecided request, Approve / Deny for controllers. */
  function drawDecision(): void {
    const p = ended ? null : pendingDecision(model.items);
    decisionBar.hidden = p === null;
    if (!p) return decisionBar.replaceChildren();
    const sent = deciding.get(p.requestId);
    decisionBar.dataset.request = p.requestId;
    decisionBar.replaceChildren(
      h("div.ell", null, h("b", null, `${p.toolName} waits for your decision`), p.path ? ` · ${p.path}` : ""),
      control
        ? h(
            "div.actions",
            null,
            h("button.approve", { type: "button", disabled: !!sent, onclick: () => ctx.decide(p.requestId, "allow") }, "Approve"),
            h("button.deny", { type: "button", disabled: !!sent, onclick: () => ctx.decide(p.requestId, "deny") }, "Deny"),
          )
        : h("div.muted", null, "Waiting for someone who may decide."),
    );
  }

  // ---- banners
  const setBanner = (el: HTMLElement, cls: string, state: string, text: string) => {
    el.className = `banner ${cls}`;
    el.dataset.state = state;
    el.textContent = text;
  };
  const show = (el: HTMLElement, b: { state: string; cls: string; text: string; hidden?: boolean }) => {
    setBanner(el, b.cls, b.state, b.text);
    el.hidden = b.hidden === true;
  };
  const drawStatus = () => {
    const b = describe(truth, { now: Date.now(), clock, backNotice: Date.now() < backUntil });
    show(deviceBanner, b.device);
    show(streamBanner, b.stream);
    show(bridgeBanner, b.agent);
    drawEnd();
  };
  const drawStream = drawStatus;
  const feel = (e: StatusEvent) => {
    truth = reduce(truth, e);
    drawStatus();
  };
  const onDevice = () => feel({ t: "device", online: navigator.onLine, at: Date.now() });
  /** The turns finished so far are on screen: the list stops counting them as not seen. */
  const markSeen = () => {
    if (state && document.visibilityState === "visible") markTurnsSeen(id, state.counts.turns);
  };
  document.addEventListener("visibilitychange", markSeen);
  window.addEventListener("online", onDevice);
  window.addEventListener("offline", onDevice);
  const drawRecovery = () => {
    const interrupted = state?.phase === "interrupted";
    recoveryBar.hidden = !interrupted;
    if (interrupted) {
      recoveryBar.replaceChildren("The session was interrupted mid-work. ", h("button", { type: "button", id: "recovery-btn", onclick: () => openRecovery() }, "Recovery brief"));
    }
  };
  // ---- end states: nothing more will happen here, and the page says what still can.
  const resumeCommand = () => `moor resume ${info?.name ?? id}`;
  const drawEnd = () => {
    const st = truth.stream;
    if (st.kind === "refused" && st.status !== 401) {
      endBar.hidden = false;
      endBar.dataset.state = truth.hadAccess || st.hadAccess ? "removed" : "gone";
      endBar.replaceChildren(
        h("span", null, truth.hadAccess || st.hadAccess ? "You no longer have access to this session. " : "There is no such session you can open. "),
        h("a.button", { href: "#/", id: "end-back" }, "Back to the sessions"),
      );
      scroller.classList.add("stale");
      composeSlot.replaceChildren();
      return;
    }
    if (ended && truth.ended) {
      endBar.hidden = false;
      endBar.dataset.state = "ended";
      endBar.className = "banner muted";
      endBar.replaceChildren(
        h("span", null, "This session has ended: nothing you send would reach an agent. "),
        h("button.tb", { type: "button", id: "end-recovery", onclick: () => void openRecovery() }, "Recovery brief"),
        h("button.tb", { type: "button", id: "end-checkpoints", onclick: () => void openCheckpoints() }, "Checkpoints"),
        h(
          "button.tb",
          { type: "button", id: "end-resume", title: "Copy the command that resumes this session on the agent's machine", onclick: () => void navigator.clipboard?.writeText(resumeCommand()) },
          "Copy ",
          h("code", null, resumeCommand()),
        ),
      );
      composeSlot.replaceChildren();
      return;
    }
    endBar.hidden = true;
  };
  /** The log or the server says the session ended: the composer goes, the way on is offered. */
  const setEnded = () => {
    if (ended) return;
    ended = true;
    feel({ t: "ended" });
  };

  const backTimer = setInterval(() => {
    if (status.kind === "live" && backUntil && Date.now() >= backUntil) {
      backUntil = 0;
      drawStream();
    }
    askSpool();
  }, 1000);

  // The spool's depth reaches the page only with the session's info, so while entries are said
  // to wait on the machine, ask again every SPOOL_ASK_MS: the figure shown stays current.
  const askSpool = () => {
    if ((spooled === 0 && !spoolCheck) || status.kind !== "live" || Date.now() - spoolAskedAt < SPOOL_ASK_MS) return;
    spoolAskedAt = Date.now();
    spoolCheck = false;
    api.session(id).then(
      (i) => {
        spooled = i.bridge.spool_unacked ?? 0;
        if (agentSeen) feel({ t: "agent", agent: { ...agentSeen, spooled: agentSeen.online ? spooled : 0 }, at: Date.now() });
      },
      () => {},
    );
  };

  const setBridge = (online: boolean, since: number | null, reason: string | null, at: number) => {
    if (at < bridgeAt) return;
    bridgeAt = at;
    const agent: AgentSeen = { online, since, reason, phase: state ? phaseText(state) : null, spooled: online ? spooled : 0 };
    agentSeen = agent;
    feel({ t: "agent", agent, at: Date.now() });
  };

  // ---- pending inputs (not yet in the log)
  const drawPending = () => {
    const recs = deps.outbox.list(id).filter((r) => r.seq === null || r.seq > win.hi);
    pending.replaceChildren(...recs.map(pendingRow));
    pending.hidden = recs.length === 0;
  };
  const pendingRow = (r: OutboxRecord) => {
    const what = r.kind === "input.text" ? String((r.payload as PayloadOf<"input.text">).text ?? "") : r.kind;
    // Stored on the server with no bridge there: queued for the agent. Stored with a bridge
    // there: sent, its receipts follow in the log.
    const state = r.error ? "refused" : r.seq === null ? "sending" : r.queued ? "queued" : "sent";
    const label = r.error
      ? `refused: ${r.error}`
      : r.seq === null
        ? "waiting to send (kept on this device)"
        : r.queued
          ? "queued for the agent: no bridge is connected"
          : "sent to the server";
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
    s.body.append(await checkpointsPanel(id, win.entries, state?.last_checkpoint ?? null, info?.name));
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
    drawEnd();
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
  /** Stores entries the window gained on this device (best effort: the page works without). */
  function keep(added: Entry[]): void {
    cache?.add(id, added, win.hi).catch(() => {});
  }
  let metaTimer: ReturnType<typeof setTimeout> | null = null;
  const saveMeta = () => {
    if (metaTimer || !cache) return;
    metaTimer = setTimeout(() => {
      metaTimer = null;
      if (info) cache?.saveMeta({ session: id, info, state, at: Date.now(), compacted: win.compacted }).catch(() => {});
    }, META_SAVE_MS);
  };

  const onEntries = (batch: Entry[]) => {
    const added = win.append(batch);
    if (!added.length) return;
    saveCursor();
    keep(added);
    for (const e of added) {
      const b = typed(e);
      if (b?.kind === "bridge.connected") {
        setBridge(true, e.ts, null, e.seq);
        // A bridge that was away may come back with entries spooled; the server knows once its
        // first heartbeat arrives, so the page asks a little later, then while any wait.
        spoolCheck = true;
        spoolAskedAt = Date.now();
      } else if (b?.kind === "bridge.disconnected") setBridge(false, e.ts, b.payload.reason ?? null, e.seq);
      else if (b?.kind === "session.ended") setEnded();
    }
    if (term) term.write(added);
    model.apply(added);
    // A checkpoint ends the turns before it: their prompts and results get their review link.
    if (added.some((e) => e.kind === "checkpoint.created")) for (const it of model.items) if (it.t === "input" || it.t === "sys") it.v += 1;
    sync();
    vl.appended();
    vl.changed();
    drawDecision();
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
        changes.update(s);
        markSeen();
        saveMeta();
        setBridge(s.link.up, s.link.since, s.link.reason, s.head);
        drawRecovery();
      },
      onInfo: (i) => {
        if (!anchored) anchorAt(i);
        info = i;
        saveMeta();
        applyRole(i.role);
        title.textContent = i.name;
        setTitle(`${i.name} · Mooring`);
        feel({ t: "access" });
        if (i.state) {
          state = i.state;
          changes.update(i.state);
          markSeen();
          drawRecovery();
        }
        if (i.status === "ended") setEnded();
        spooled = i.bridge.spool_unacked ?? 0;
        setBridge(i.bridge.online, i.bridge.since, i.bridge.last_reason, i.head_seq);
        deps.outbox.pump();
      },
      onReset: (r) => {
        // The server's log is not the one our cursor came from: start again at its head (what
        // compaction removed from the other log says nothing of this one).
        localStorage.removeItem(cursorKey(id));
        cache?.clearEntries(id).catch(() => {});
        win.compacted = null;
        void reanchor(r.head_seq);
      },
      // Entries after the cursor were compacted away: the stream goes on with the kept ones.
      onCompacted: (c) => learnCompacted(c),
      onStatus: (s) => {
        if (s.kind === "live" && s.resumed && (status.kind === "catching-up" || status.kind === "reconnecting" || status.kind === "connecting")) {
          backUntil = Date.now() + BACK_NOTICE_MS;
        }
        status = s;
        feel({ t: "stream", status: s, at: Date.now() });
        if (s.kind === "refused" && s.status !== 401) forget();
        if (s.kind === "live") deps.outbox.pump();
      },
    },
    { watchdogMs: watchdogFor(deps.keepaliveMs) },
  );

  /** Nothing of the session stays on a device that may no longer see it. */
  function forget(): void {
    localStorage.removeItem(cursorKey(id));
    cache?.forget(id).catch(() => {});
  }

  /** Starts the window at `head` (empty); the history below it is paged in like older pages. */
  function reanchor(head: number): Promise<boolean> {
    anchorGen += 1;
    if (win.entries.length) cache?.clearEntries(id).catch(() => {});
    win.reset(head);
    model.rebuild(win.entries, win.below, win.compacted);
    sync();
    vl.reset();
    term?.reload(win.entries, win.below, win.compacted);
    return loadOlder();
  }

  /** The terminal of a PTY session (xterm.js is loaded only for those), drawn from the window. */
  let termLoading: Promise<void> | null = null;
  function ensureTerminal(i: SessionInfo): Promise<void> {
    interrupt.hidden = i.agent?.adapter !== "claude";
    if (i.agent?.adapter !== "pty") return Promise.resolve();
    keysToggle.hidden = false;
    termLoading ??= (async () => {
      const { Terminal } = await import("./terminal");
      if (stopped) return;
      term = new Terminal(termBox, control ? (kind, payload) => void send(kind, payload) : null);
      termBox.hidden = false;
      scroller.classList.add("under-term");
      term.reload(win.entries, win.below, win.compacted);
    })();
    return termLoading;
  }

  /** Draws what this device kept of the session: transcript, terminal, composer, last state. */
  function restore(w: StoredWindow): void {
    const m = w.meta;
    if (m.info) {
      info = m.info;
      applyRole(m.info.role);
      title.textContent = m.info.name;
      setTitle(`${m.info.name} · Mooring`);
    }
    if (m.state) {
      state = m.state;
      changes.update(m.state);
      drawRecovery();
    }
    // The gaps compaction left in the stored window, as the stored mark explains them.
    if (m.compacted) win.noteCompacted(m.compacted);
    if (w.entries.length) {
      win.reset(w.entries[0].seq - 1);
      win.append(w.entries);
      win.hasOlder = win.lo > 1;
      model.rebuild(win.entries, win.below, win.compacted);
      sync();
      vl.reset();
      restoredHi = win.hi;
      restoreRest(win.lo, win.entries.length);
    }
    const b = m.info?.bridge;
    feel({
      t: "stored",
      agent: b ? { online: b.online, since: b.since, reason: b.last_reason, phase: m.state ? phaseText(m.state) : null } : null,
      at: m.at,
      ended: m.info?.status === "ended",
    });
    if (m.info?.status === "ended") setEnded();
    if (m.info) void ensureTerminal(m.info);
    void deps.outbox.settle(id, win.hi);
    drawPending();
  }
  let restoredHi = 0;

  /**
   * Where the stream starts, once the server's head is known: after the stored window when it
   * is part of this log and close enough; else after the stored cursor; else at the head. A gap
   * larger than MAX_REPLAY is not replayed: the view opens at the head and says so.
   */
  function anchorAt(i: SessionInfo): void {
    anchored = true;
    const head = i.head_seq;
    const stored = Number(localStorage.getItem(cursorKey(id)) ?? 0);
    // The kept window is written after the cursor (IndexedDB is asynchronous): a page that died
    // in between kept less than it showed. Then the cursor, which is exact, decides.
    if (restoredHi > 0 && restoredHi >= stored && restoredHi <= head && head - restoredHi <= MAX_REPLAY) return;
    if (restoredHi > 0 && head - restoredHi > MAX_REPLAY) {
      skipped = head - restoredHi;
    }
    const anchor = stored > 0 && stored <= head && head - stored <= MAX_REPLAY ? stored : head;
    if (anchor === head && stored > 0 && head - stored > MAX_REPLAY) skipped = head - stored;
    drawSkipped();
    // Live entries and the history below them load at the same time.
    void reanchor(anchor).then(() => performance.mark("moor:history"));
  }
  let skipped = 0;
  const skippedNote = h("div.banner.warn", { id: "skipped-note", hidden: true });
  header.append(skippedNote);
  const drawSkipped = () => {
    skippedNote.hidden = skipped === 0;
    skippedNote.textContent = skipped ? `${skipped} entries came while you were away: opened at the newest; scroll up to page back through them.` : "";
  };

  // ---- open
  let stopped = false;
  (async () => {
    drawStatus();
    drawPending();
    cache = await windowCache();
    // The newest page of the kept window first (the first screen), the rest after it is drawn.
    const kept = await (deps.kept ?? keptTail(id));
    if (stopped) return;
    if (kept) {
      restore(kept);
      performance.mark("moor:restored");
    }
    let first: SessionInfo | null;
    try {
      first = (await deps.early) ?? (await api.session(id));
      performance.mark("moor:info");
    } catch (e) {
      if (e instanceof ApiError && (e.status === 401 || e.status === 403 || e.status === 404)) {
        // No stream without access: say so and stop (a 401 also brings the login page, which
        // comes back here).
        feel({ t: "stream", status: { kind: "refused", status: e.status, hadAccess: false }, at: Date.now() });
        if (e.status !== 401) forget();
        return;
      }
      if (e instanceof ApiError) setBanner(streamBanner, "bad", "error", `Cannot open this session: ${e.message}`);
      // The stream loop retries (and says so) until the server answers; it anchors then.
      first = null;
    }
    if (stopped) return;
    if (first) {
      applyRole(first.role);
      anchorAt(first);
      await ensureTerminal(first);
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
    inputTexts: () => model.items.flatMap((it) => (it.t === "input" ? [it.text] : [])),
    shownInputTexts: () => shown.flatMap((it) => (it.t === "input" ? [it.text] : [])),
    keptHi: async () => {
      const w = await (await windowCache())?.load(id);
      return w?.entries.length ? w.entries[w.entries.length - 1].seq : 0;
    },
    keptCount: async () => (await (await windowCache())?.load(id))?.entries.length ?? 0,
    terminalText: () => (term ? (termBox.querySelector(".xterm-rows")?.textContent ?? "") : null),
  };
  (window as unknown as { __moor: unknown }).__moor = probe;

  return () => {
    stopped = true;
    stream.stop();
    vl.destroy();
    saveCursor();
    offOutbox();
    clearInterval(backTimer);
    window.removeEventListener("online", onDevice);
    window.removeEventListener("offline", onDevice);
    document.removeEventListener("visibilitychange", markSeen);
    term?.dispose();
  };
}
