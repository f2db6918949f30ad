// What the session page says about the world: three truths kept apart, each shown only when the
// page knows it. This device (online or offline, from the browser's own signal, never guessed
// from failed fetches); this page's stream to the server (live, reconnecting, server
// unreachable, access removed, session gone); and the agent as the server last said — vouched
// for only while the page's own stream is live, and otherwise "unknown since …", in grey.
// Pure: events in, state out; `describe` turns a state into the banners' words.

import type { StreamStatus } from "./stream";

/** The agent's bridge as the server last reported it. */
export interface AgentSeen {
  online: boolean;
  /** Since when online/offline (ms); null: no bridge ever connected. */
  since: number | null;
  reason: string | null;
  /** The phase in words (phase.ts), if a state came with it. */
  phase: string | null;
  /** Entries waiting in the bridge's spool on its machine, not yet on the server, as the bridge
   * last reported (absent or 0: none, or not reported). */
  spooled?: number;
}

export interface Status {
  /** `navigator.onLine` and its events. */
  deviceOnline: boolean;
  /** Since when the device is offline (ms), while it is. */
  offlineSince: number | null;
  stream: StreamStatus;
  /** What the server last said about the agent; null until it said anything. */
  agent: AgentSeen | null;
  /** Until when (ms) the page's stream proved `agent`: the moment the stream stopped being live,
   * or when the stored snapshot was taken. Null while the stream is live. */
  agentAsOf: number | null;
  /** The server let this page see the session at least once. */
  hadAccess: boolean;
  /** The session ended (its log says so). */
  ended: boolean;
}

export type StatusEvent =
  | { t: "device"; online: boolean; at: number }
  | { t: "stream"; status: StreamStatus; at: number }
  /** The server's word on the bridge (session info, state, a bridge entry). */
  | { t: "agent"; agent: AgentSeen; at: number }
  /** The server answered this page with the session (info fetched): it has access. */
  | { t: "access" }
  /** A snapshot kept on this device from an earlier visit, taken at `at`. */
  | { t: "stored"; agent: AgentSeen | null; at: number; ended: boolean }
  | { t: "ended" };

export function initial(deviceOnline: boolean, now: number): Status {
  return {
    deviceOnline,
    offlineSince: deviceOnline ? null : now,
    stream: { kind: "connecting" },
    agent: null,
    agentAsOf: null,
    hadAccess: false,
    ended: false,
  };
}

/** Whether the page's own stream is up (a catching-up stream is connected: its info is fresh). */
export function streamUp(s: StreamStatus): boolean {
  return s.kind === "live" || s.kind === "catching-up";
}

/** A stream status that ends the page's attempts: nothing will change it but a new visit. */
export function streamEnded(s: StreamStatus): boolean {
  return s.kind === "refused" || s.kind === "stopped";
}

export function reduce(s: Status, e: StatusEvent): Status {
  switch (e.t) {
    case "device":
      if (e.online === s.deviceOnline) return s;
      return { ...s, deviceOnline: e.online, offlineSince: e.online ? null : e.at };
    case "stream": {
      // An ended attempt stays ended: a late status of the stopped loop does not revive it.
      if (s.stream.kind === "refused") return s;
      // The agent's word holds until the moment the stream stops being up.
      let agentAsOf = s.agentAsOf;
      if (streamUp(e.status)) agentAsOf = null;
      else if (streamUp(s.stream)) agentAsOf = e.at;
      return { ...s, stream: e.status, agentAsOf };
    }
    case "agent":
      // Heard while the stream is down (the info fetched before a connect): true as of now.
      return { ...s, agent: e.agent, agentAsOf: streamUp(s.stream) ? null : e.at };
    case "access":
      return { ...s, hadAccess: true };
    case "stored":
      // Only until the server says more: a stored snapshot never overrides a fresher word.
      if (s.agent) return s;
      return { ...s, agent: e.agent, agentAsOf: e.agent ? e.at : s.agentAsOf, ended: s.ended || e.ended };
    case "ended":
      return { ...s, ended: true };
  }
}

export interface Banner {
  /** `data-state`: what tests and styles key on. */
  state: string;
  /** Class: ok (green), warn, bad, muted (grey). */
  cls: "ok" | "warn" | "bad" | "muted";
  text: string;
  /** Not shown at all. */
  hidden?: boolean;
}

export interface Banners {
  device: Banner;
  stream: Banner;
  agent: Banner;
}

export interface DescribeOpts {
  now: number;
  /** Formats a time (ms) for a banner ("12:04:05"). */
  clock: (ms: number | null) => string;
  /** The stream came back and its "back, k missed" notice is still due. */
  backNotice?: boolean;
}

/** The three banners for `s`. */
export function describe(s: Status, o: DescribeOpts): Banners {
  return { device: deviceBanner(s, o), stream: streamBanner(s, o), agent: agentBanner(s, o) };
}

function deviceBanner(s: Status, o: DescribeOpts): Banner {
  if (s.deviceOnline) return { state: "online", cls: "ok", text: "", hidden: true };
  return { state: "offline", cls: "warn", text: `This device is offline${s.offlineSince ? ` (since ${o.clock(s.offlineSince)})` : ""}: what you send waits here.` };
}

function streamBanner(s: Status, o: DescribeOpts): Banner {
  const st = s.stream;
  switch (st.kind) {
    case "refused":
      if (st.status === 401) return { state: "logged-out", cls: "bad", text: "You are logged out: log in again to see this session." };
      if (s.hadAccess || st.hadAccess) {
        return { state: "removed", cls: "bad", text: "Your access to this session was removed: this page no longer follows it." };
      }
      return { state: "gone", cls: "bad", text: "This session does not exist, or you have no role on it." };
    case "stopped":
      return { state: "stopped", cls: "muted", text: "Stopped" };
    case "live":
      if (st.resumed && o.backNotice) {
        return { state: "back", cls: "ok", text: `Back: ${st.replayed} missed ${st.replayed === 1 ? "entry" : "entries"} replayed` };
      }
      return { state: "live", cls: "ok", text: "Live" };
    case "catching-up":
      // With compaction, `missed` counts seqs, some of them no longer stored: fewer are coming.
      if (st.compacted) return { state: "catching-up", cls: "warn", text: `Catching up: ${st.got} of at most ${st.missed} missed entries (some were compacted on the server)` };
      return { state: "catching-up", cls: "warn", text: `Catching up: ${st.got} of ${st.missed} missed entries` };
    default:
      break;
  }
  // Not connected. Offline is the device's doing: no attempt counter, no blame on the server.
  if (!s.deviceOnline) return { state: "offline", cls: "muted", text: "Not connected: waiting for this device to be online again." };
  if (st.kind === "connecting") return { state: "connecting", cls: "warn", text: "Connecting…" };
  if (st.unreachable) {
    return { state: "unreachable", cls: "bad", text: `Server unreachable since ${o.clock(st.since)}: retrying (attempt ${st.attempt})` };
  }
  return { state: "reconnecting", cls: "bad", text: `Reconnecting, attempt ${st.attempt}: ${st.reason} (since ${o.clock(st.since)})` };
}

function agentBanner(s: Status, o: DescribeOpts): Banner {
  if (s.ended) return { state: "ended", cls: "muted", text: "Session ended" };
  const a = s.agent;
  if (!streamUp(s.stream)) {
    // The page cannot see the agent: what it last knew, as of when, and never in green.
    if (!a) return { state: "unknown", cls: "muted", text: "Agent: unknown (not connected)" };
    const last = a.online ? `online${a.phase ? ` · ${a.phase}` : ""}` : a.since === null ? "no bridge yet" : `offline since ${o.clock(a.since)}`;
    return { state: "unknown", cls: "muted", text: `Agent: unknown since ${o.clock(s.agentAsOf)} (last known: ${last})` };
  }
  if (!a) return { state: "unknown", cls: "muted", text: "Agent: asking the server…" };
  if (a.online) return { state: "online", cls: "ok", text: `Agent online${a.phase ? ` · ${a.phase}` : ""}${spoolText(a.spooled)}` };
  if (a.since === null) return { state: "none", cls: "muted", text: "Agent: no bridge has connected yet" };
  const phase = a.phase ? ` · last known: ${a.phase}` : "";
  return { state: "offline", cls: "bad", text: `Agent offline since ${o.clock(a.since)}${a.reason ? ` (${a.reason})` : ""}${phase}` };
}

/** " · 3 entries waiting on the machine" while the bridge reports entries not yet sent; "" else. */
export function spoolText(spooled: number | undefined): string {
  if (!spooled || spooled <= 0) return "";
  return ` · ${spooled} ${spooled === 1 ? "entry" : "entries"} waiting on the machine`;
}
