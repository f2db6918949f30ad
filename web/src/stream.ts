// The page's own live stream of a session: SSE read through fetch, resumed from the window's last
// seq after every failure, with a watchdog that treats silence as death. Its status is the truth
// the stream banner shows: it never says "live" while nothing proves it.
//
// A reset names a cursor the server cannot honour as it is. Without `compacted`, the stream ends
// and the view starts again elsewhere. With `compacted`, log compaction removed entries after the
// cursor: the view learns what is missing and the stream goes on with the kept entries (several
// such resets may come in one stream, as compaction moves on while it is read).

import { api, ApiError, authFetch } from "./api";
import type { Compacted } from "./protocol/Compacted";
import type { Entry } from "./protocol/Entry";
import type { Reset } from "./protocol/Reset";
import type { SessionInfo } from "./protocol/SessionInfo";
import type { SessionState } from "./protocol/SessionState";
import { SseParser } from "./sse";
import { GapError } from "./window";

export type StreamStatus =
  | { kind: "connecting" }
  /**
   * `missed`: seqs between the cursor and the head at connect; `got`: entries received of them.
   * `compacted`: compaction removed some of them, so fewer than `missed` are coming.
   */
  | { kind: "catching-up"; missed: number; got: number; resumed: boolean; compacted?: boolean }
  /** `replayed`: entries received while catching up. */
  | { kind: "live"; replayed: number; resumed: boolean; since: number }
  /** `unreachable`: the last attempt could not reach the server at all (not a dropped stream). */
  | { kind: "reconnecting"; attempt: number; reason: string; since: number; unreachable?: boolean }
  /** The server refused the page for good (401/403/404): no more attempts. `hadAccess`: it had
   * shown this page the session before. */
  | { kind: "refused"; status: number; hadAccess: boolean }
  | { kind: "stopped" };

export interface StreamHooks {
  /** The seq the stream must resume after (the window's hi). */
  cursor(): number;
  /** Entries above the cursor, in order (the hook appends them; an unexplained gap throws). */
  onEntries(entries: Entry[]): void;
  onState(state: SessionState): void;
  /** Fetched before every (re)connect: head, bridge, name. */
  onInfo(info: SessionInfo): void;
  /** The cursor cannot be honoured (a reset without `compacted`); the hook re-anchors before the next connect. */
  onReset(reset: Reset): void;
  /**
   * Compaction removed entries of `compacted.kinds` after the cursor, up to `compacted.through`
   * (a reset with `compacted`): the stream goes on, and the kept entries that follow come with
   * gaps the hook must take.
   */
  onCompacted(compacted: Compacted, reset: Reset): void;
  onStatus(status: StreamStatus): void;
}

export interface StreamOptions {
  /** Silence (no byte, not even a keep-alive) longer than this means the stream is dead. */
  watchdogMs: number;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
}

/** Watchdog interval for a server keep-alive interval: two missed keep-alives and a margin. */
export function watchdogFor(keepaliveMs: number): number {
  return keepaliveMs * 2 + 1000;
}

class Stop extends Error {}
/** The page was put away (back/forward cache): not a failure, no reconnect until it is shown. */
class Parked extends Error {}

export class LiveStream {
  private ctrl: AbortController | null = null;
  private lastByte = 0;
  private failures = 0;
  private stopped = false;
  private timer: ReturnType<typeof setInterval> | null = null;
  /** Owns the window and document listeners added by start. */
  private readonly listening = new AbortController();
  private wake: (() => void) | null = null;
  private status: StreamStatus = { kind: "connecting" };
  private initial: SessionInfo | null = null;
  private downSince = 0;
  private parked = false;
  private frozenAt = 0;
  /** The server answered this stream with the session at least once. */
  private hadAccess = false;
  /** The current attempt has its stream open (failures after this are drops, not "unreachable"). */
  private opened = false;
  private readonly onOnline = () => this.wakeUp();
  private readonly onOffline = () => this.kill("the browser went offline");
  private readonly onVisible = () => {
    if (document.visibilityState === "visible") this.check();
  };
  // A page going into the back/forward cache drops its stream (an open fetch would get it
  // evicted, and nothing would read it anyway); coming back, it reconnects from the cursor.
  private readonly onPageHide = (e: PageTransitionEvent) => {
    if (e.persisted) this.park("the page was put away");
  };
  private readonly onPageShow = (e: PageTransitionEvent) => {
    if (e.persisted) this.unpark("the page came back from the back/forward cache");
    else this.check();
  };
  // A frozen page (a phone asleep, a background tab) runs no timer, so the watchdog cannot fire
  // while it sleeps. Whatever the old connection buffered meanwhile proves nothing about now:
  // after a sleep longer than the watchdog interval, reconnect at once instead of trusting it.
  private readonly onFreeze = () => {
    this.frozenAt = Date.now();
  };
  private readonly onResume = () => {
    const asleep = this.frozenAt ? Date.now() - this.frozenAt : 0;
    this.frozenAt = 0;
    if (asleep > this.opts.watchdogMs) this.kill(`the page was asleep for ${Math.round(asleep / 1000)} s`);
    else this.check();
  };

  constructor(
    private readonly sessionId: string,
    private readonly hooks: StreamHooks,
    private readonly opts: StreamOptions,
  ) {}

  /** Starts; `info`, when given, is used for the first connect instead of asking again. */
  start(info?: SessionInfo): void {
    this.initial = info ?? null;
    // Aborting `listening` (in stop) removes every one of these at once.
    const signal = this.listening.signal;
    window.addEventListener("online", this.onOnline, { signal });
    window.addEventListener("offline", this.onOffline, { signal });
    document.addEventListener("visibilitychange", this.onVisible, { signal });
    window.addEventListener("pagehide", this.onPageHide, { signal });
    window.addEventListener("pageshow", this.onPageShow, { signal });
    document.addEventListener("freeze", this.onFreeze, { signal });
    document.addEventListener("resume", this.onResume, { signal });
    this.timer = setInterval(() => this.check(), Math.min(500, this.opts.watchdogMs / 4));
    void this.loop();
  }

  /** Stops for good; `say`: report "stopped" (not when an end state was reported already). */
  stop(say = true): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.listening.abort();
    this.ctrl?.abort(new Stop("stopped"));
    this.wakeUp();
    if (say && this.status.kind !== "refused") this.setStatus({ kind: "stopped" });
  }

  /** Drops the current connection now (and reconnects), e.g. when the window was re-anchored. */
  restart(reason: string): void {
    this.kill(reason);
  }

  /** Drops the connection and does not reconnect until `unpark`. */
  private park(reason: string): void {
    if (this.stopped) return;
    this.parked = true;
    this.ctrl?.abort(new Parked(reason));
    this.ctrl = null;
    this.down(reason);
    this.wakeUp();
  }

  private unpark(reason: string): void {
    if (this.stopped) return;
    this.parked = false;
    this.kill(reason);
  }

  private check(): void {
    if (this.ctrl && Date.now() - this.lastByte > this.opts.watchdogMs) {
      this.kill(`no data for ${Math.round((Date.now() - this.lastByte) / 1000)} s`);
    }
  }

  private kill(reason: string): void {
    if (this.stopped) return;
    if (this.ctrl) {
      this.ctrl.abort(new Error(reason));
      this.ctrl = null;
    }
    // Say so at once; the loop's backoff then takes over.
    this.down(reason);
    this.wakeUp();
  }

  private wakeUp(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  private setStatus(s: StreamStatus): void {
    this.status = s;
    this.hooks.onStatus(s);
  }

  private down(reason: string, unreachable = false): void {
    if (this.status.kind === "refused") return;
    if (this.status.kind !== "reconnecting") this.downSince = Date.now();
    this.setStatus({
      kind: "reconnecting",
      attempt: this.failures + 1,
      reason,
      since: this.downSince,
      unreachable,
    });
  }

  private async loop(): Promise<void> {
    let resumed = false;
    while (!this.stopped) {
      try {
        await this.once(resumed);
      } catch (e) {
        if (this.stopped || e instanceof Stop) break;
        if (e instanceof ApiError && REFUSED.has(e.status)) {
          // Retrying will not bring access back: say so and stop (the view offers the way out).
          this.setStatus({ kind: "refused", status: e.status, hadAccess: this.hadAccess });
          this.stop(false);
          break;
        }
        if (!(e instanceof Parked)) {
          this.failures += 1;
          this.down(reason(e), !this.opened && navigator.onLine && isNetworkError(e));
        }
      }
      if (this.stopped) break;
      resumed = true;
      await this.backoff();
      // An offline device reaches nothing: wait for the browser to say it is back, not counting
      // attempts that cannot succeed.
      while ((this.parked || !navigator.onLine) && !this.stopped) await this.until();
    }
  }

  /** Resolves at the next `wakeUp`. */
  private until(): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
    });
  }

  private backoff(): Promise<void> {
    const initial = this.opts.backoffInitialMs ?? 250;
    const max = this.opts.backoffMaxMs ?? 5000;
    const base = Math.min(max, initial * 2 ** Math.max(0, this.failures - 1));
    const ms = this.failures === 0 ? 50 : base * (0.8 + Math.random() * 0.4);
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(t);
        resolve();
      };
    });
  }

  private async once(resumed: boolean): Promise<void> {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    this.opened = false;
    this.lastByte = Date.now();
    // The head now, to tell how many entries the resume replays (and the bridge's status).
    const initial = this.initial;
    this.initial = null;
    const info = initial ?? (await withSignal(api.session(this.sessionId), ctrl.signal));
    this.hadAccess = true;
    this.hooks.onInfo(info);
    const after = this.hooks.cursor();
    const head = info.head_seq;
    const url = `/api/v1/sessions/${encodeURIComponent(this.sessionId)}/events?after=${after}&state=true`;
    // An expired access token is renewed here (refresh cookie, once) and the stream opened again.
    const res = await authFetch(url, { headers: { Accept: "text/event-stream" }, signal: ctrl.signal });
    if (!res.ok || !res.body) {
      let body = null;
      try {
        body = await res.json();
      } catch {
        body = null;
      }
      throw new ApiError(res.status, body);
    }
    performance.mark("moor:stream-open");
    this.opened = true;
    // Seqs are not entries once compaction ran: progress counts the entries received, and the
    // stream is caught up when the cursor reaches the head at connect. When compaction reaches
    // the head, the entries up to it may all be gone and the cursor may never get there: then the
    // server going quiet (a keep-alive: it had nothing left to send) says the replay is over.
    const missed = Math.max(0, head - after);
    let got = 0;
    /** The furthest compaction mark this stream named (0: none). */
    let compactedThrough = 0;
    const caughtUp = () => {
      this.failures = 0;
      this.setStatus({ kind: "live", replayed: got, resumed, since: Date.now() });
    };
    const progress = () => this.setStatus({ kind: "catching-up", missed, got, resumed, compacted: compactedThrough > 0 || undefined });
    if (missed === 0) caughtUp();
    else progress();
    const deliver = (batch: Entry[]) => {
      if (!resumed && this.failures === 0) performance.mark("moor:first-entry");
      const from = this.hooks.cursor();
      this.hooks.onEntries(batch);
      if (this.status.kind !== "catching-up") return;
      const to = Math.min(head, this.hooks.cursor());
      got += batch.filter((e) => e.seq > from && e.seq <= to).length;
      if (this.hooks.cursor() >= head) caughtUp();
      else progress();
    };
    const reader = res.body.getReader();
    const parser = new SseParser();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) throw new Error("the server ended the stream");
        this.lastByte = Date.now();
        const out = parser.push(value);
        const batch: Entry[] = [];
        for (const ev of out.events) {
          if (ev.event === "state") {
            this.hooks.onState(JSON.parse(ev.data) as SessionState);
          } else if (ev.event === "reset") {
            // The entries before it are below its cursor: they go first.
            if (batch.length) deliver(batch.splice(0));
            const reset = JSON.parse(ev.data) as Reset;
            if (!reset.compacted) {
              this.hooks.onReset(reset);
              throw new Error("the server reset the cursor");
            }
            compactedThrough = Math.max(compactedThrough, reset.compacted.through);
            this.hooks.onCompacted(reset.compacted, reset);
            if (this.status.kind === "catching-up") progress();
          } else {
            batch.push(JSON.parse(ev.data) as Entry);
          }
        }
        if (batch.length) deliver(batch);
        if (this.status.kind === "catching-up" && compactedThrough >= head && out.comments.includes("keep-alive")) caughtUp();
      }
    } finally {
      if (this.ctrl === ctrl) this.ctrl = null;
      ctrl.abort();
    }
  }
}

/** Answers after which the page stops trying: logged out, no role (any more), no such session. */
const REFUSED = new Set([401, 403, 404]);

function isNetworkError(e: unknown): boolean {
  return e instanceof TypeError || (e instanceof Error && e.message === "Failed to fetch");
}

function reason(e: unknown): string {
  if (e instanceof GapError) return `gap in the stream (${e.message})`;
  if (e instanceof ApiError) {
    if (e.status === 401) return "the server refused the token";
    return e.message;
  }
  if (e instanceof Error) {
    if (e.name === "AbortError") return "connection dropped";
    if (e.message === "Failed to fetch" || e.name === "TypeError") return "the server is unreachable";
    return e.message;
  }
  return String(e);
}

function withSignal<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", onAbort);
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", onAbort);
        reject(e);
      },
    );
  });
}
