import { describe as group, expect, it } from "vitest";
import { describe, initial, reduce, type AgentSeen, type Status, type StatusEvent } from "../src/status";
import type { StreamStatus } from "../src/stream";

const clock = (ms: number | null) => (ms === null ? "never" : `t${ms}`);
const say = (s: Status, backNotice = false) => describe(s, { now: 0, clock, backNotice });
const run = (s: Status, ...events: StatusEvent[]) => events.reduce(reduce, s);

const live: StreamStatus = { kind: "live", replayed: 0, resumed: false, since: 1 };
const back = (n: number): StreamStatus => ({ kind: "live", replayed: n, resumed: true, since: 1 });
const catching: StreamStatus = { kind: "catching-up", missed: 10, got: 2, resumed: true };
const dropped = (attempt = 1, since = 100): StreamStatus => ({ kind: "reconnecting", attempt, reason: "connection dropped", since });
const unreachable = (attempt = 1, since = 100): StreamStatus => ({ kind: "reconnecting", attempt, reason: "the server is unreachable", since, unreachable: true });
const refused = (status: number, hadAccess = false): StreamStatus => ({ kind: "refused", status, hadAccess });
const online: AgentSeen = { online: true, since: 5, reason: null, phase: "idle, waiting for a prompt" };
const offline: AgentSeen = { online: false, since: 50, reason: "bridge closed", phase: null };
const never: AgentSeen = { online: false, since: null, reason: null, phase: null };

const stream = (status: StreamStatus, at = 0): StatusEvent => ({ t: "stream", status, at });
const agent = (a: AgentSeen, at = 0): StatusEvent => ({ t: "agent", agent: a, at });
const device = (on: boolean, at = 0): StatusEvent => ({ t: "device", online: on, at });

const streams: [string, StreamStatus][] = [
  ["connecting", { kind: "connecting" }],
  ["catching-up", catching],
  ["live", live],
  ["reconnecting", dropped()],
  ["unreachable", unreachable()],
  ["refused 403", refused(403, true)],
  ["refused 404 (never had access)", refused(404)],
  ["stopped", { kind: "stopped" }],
];
const agents: [string, AgentSeen | null][] = [
  ["never heard", null],
  ["online", online],
  ["offline", offline],
  ["no bridge yet", never],
];

group("every combination of device, stream and agent", () => {
  for (const dev of [true, false]) {
    for (const [sn, st] of streams) {
      for (const [an, a] of agents) {
        it(`device ${dev ? "online" : "offline"}, stream ${sn}, agent ${an}`, () => {
          let s = initial(true, 0);
          if (a) s = run(s, stream(live, 1), agent(a, 2));
          s = run(s, device(dev, 3), stream(st, 4));
          const b = say(s);
          const up = st.kind === "live" || st.kind === "catching-up";
          // The device banner: only the browser's own signal.
          expect(b.device.state).toBe(dev ? "online" : "offline");
          expect(b.device.hidden === true).toBe(dev);
          // The agent is vouched for (green) only while the page's own stream is up.
          if (!up) {
            expect(b.agent.state).toBe("unknown");
            expect(b.agent.cls).toBe("muted");
            if (a) expect(b.agent.text).toMatch(/unknown since t4/);
          } else if (a === null) {
            expect(b.agent.cls).toBe("muted");
          } else {
            expect(b.agent.state).toBe(a.online ? "online" : a.since === null ? "none" : "offline");
          }
          if (b.agent.cls === "ok") expect(up && a?.online).toBe(true);
          // The stream banner never blames the server for an offline device, nor counts attempts then.
          if (!dev && (st.kind === "reconnecting" || st.kind === "connecting")) {
            expect(b.stream.state).toBe("offline");
            expect(b.stream.text).not.toMatch(/unreachable|attempt/i);
          }
          if (st.kind === "refused") expect(["removed", "gone"]).toContain(b.stream.state);
          if (dev && st.kind === "reconnecting") expect(b.stream.state).toBe(st.unreachable ? "unreachable" : "reconnecting");
        });
      }
    }
  }
});

group("the issue's sequences", () => {
  it("1. going offline says so, with no attempt counter, and stops vouching for the agent", () => {
    let s = run(initial(true, 0), stream(live, 1), agent(online, 1));
    expect(say(s).agent).toMatchObject({ state: "online", cls: "ok" });
    s = run(s, device(false, 1000), stream(dropped(1, 1000), 1000), stream(dropped(2, 1000), 1500), stream(dropped(3, 1000), 2500));
    const b = say(s);
    expect(b.device).toMatchObject({ state: "offline" });
    expect(b.device.text).toMatch(/since t1000/);
    expect(b.stream.state).toBe("offline");
    expect(b.stream.text).not.toMatch(/unreachable|attempt/i);
    expect(b.agent).toMatchObject({ state: "unknown", cls: "muted" });
    expect(b.agent.text).toBe("Agent: unknown since t1000 (last known: online · idle, waiting for a prompt)");
    // Back online: the stream reconnects, and only then is the agent vouched for again.
    s = run(s, device(true, 3000));
    expect(say(s).device.hidden).toBe(true);
    expect(say(s).agent.state).toBe("unknown");
    s = run(s, stream(catching, 3100), agent(online, 3100), stream(back(12), 3200));
    expect(say(s, true).stream).toMatchObject({ state: "back", text: "Back: 12 missed entries replayed" });
    expect(say(s).stream.state).toBe("live");
    expect(say(s).agent.state).toBe("online");
  });

  it("1. a server that is down, with the device online, is 'unreachable' with its attempts", () => {
    const s = run(initial(true, 0), stream(live, 1), stream(unreachable(4, 200), 900));
    expect(say(s).stream).toMatchObject({ state: "unreachable" });
    expect(say(s).stream.text).toMatch(/attempt 4/);
    expect(say(s).device.hidden).toBe(true);
  });

  it("2. a crashed agent is not shown online while the stream cannot see it; the next live word decides", () => {
    let s = run(initial(true, 0), stream(live, 1), agent(online, 1));
    s = run(s, stream(unreachable(1, 100), 100), stream(unreachable(9, 100), 45_000));
    expect(say(s).agent.cls).not.toBe("ok");
    expect(say(s).agent.text).toMatch(/unknown since t100/);
    // The server comes back and says the bridge is gone.
    s = run(s, agent(offline, 46_000), stream(back(3), 46_001));
    expect(say(s).agent).toMatchObject({ state: "offline", cls: "bad" });
  });

  it("3. a reload while the server is down shows the stored agent as unknown since the snapshot, not 'no bridge'", () => {
    let s = run(initial(true, 10_000), { t: "stored", agent: online, at: 7000, ended: false });
    s = run(s, stream(unreachable(1, 10_000), 10_001));
    expect(say(s).agent.text).toBe("Agent: unknown since t7000 (last known: online · idle, waiting for a prompt)");
    expect(say(s).agent.text).not.toMatch(/no bridge/);
    // The server's word replaces the stored one.
    s = run(s, agent(offline, 20_000), stream(live, 20_000));
    expect(say(s).agent.state).toBe("offline");
    // A stored snapshot never overrides what the server said.
    s = run(s, { t: "stored", agent: online, at: 1, ended: false });
    expect(say(s).agent.state).toBe("offline");
  });

  it("9. access removed after having had it ends the attempts and says so; no role at all says that", () => {
    let s = run(initial(true, 0), { t: "access" }, stream(live, 1), agent(online, 1));
    s = run(s, stream(refused(404, true), 50));
    expect(say(s).stream).toMatchObject({ state: "removed", cls: "bad" });
    expect(say(s).agent.cls).toBe("muted");
    // A late status of the stopped stream does not revive it.
    s = run(s, stream(dropped(6), 60), stream({ kind: "stopped" }, 61));
    expect(say(s).stream.state).toBe("removed");
    const stranger = run(initial(true, 0), stream(refused(404), 5));
    expect(say(stranger).stream.state).toBe("gone");
    expect(say(stranger).stream.text).toMatch(/no role/);
    expect(say(run(initial(true, 0), stream(refused(401), 5))).stream.state).toBe("logged-out");
  });

  it("10. an ended session says ended, whatever the stream", () => {
    const s = run(initial(true, 0), stream(live, 1), agent(online, 1), { t: "ended" }, stream(dropped(), 5));
    expect(say(s).agent).toMatchObject({ state: "ended", cls: "muted" });
  });

  it("a page that starts offline says so before any attempt", () => {
    const s = initial(false, 42);
    expect(say(s).device).toMatchObject({ state: "offline" });
    expect(say(s).stream.state).toBe("offline");
    expect(say(s).agent).toMatchObject({ state: "unknown", cls: "muted" });
  });

  it("catching up after compaction does not promise the seqs it passes as entries", () => {
    const plain = run(initial(true, 0), stream(catching, 1));
    expect(say(plain).stream.text).toBe("Catching up: 2 of 10 missed entries");
    const compacted = run(initial(true, 0), stream({ ...catching, compacted: true }, 1));
    expect(say(compacted).stream).toMatchObject({ state: "catching-up", text: "Catching up: 2 of at most 10 missed entries (some were compacted on the server)" });
  });
});

import { needsYou, sortForList } from "../src/needs";
import type { SessionInfo } from "../src/protocol/SessionInfo";

group("the list: what needs you comes first", () => {
  const s = (name: string, last: number, bridge: Partial<SessionInfo["bridge"]>, extra: Partial<SessionInfo> = {}) =>
    ({ id: name, name, created_at: 0, last_activity: last, status: "running", bridge: { online: true, since: 1, last_close_code: null, last_reason: null, ...bridge }, ...extra }) as unknown as SessionInfo;
  it("says why and sorts those sessions first", () => {
    const fine = s("fine", 300, {});
    const lost = s("lost", 100, { online: false, since: 50 });
    const never = s("never", 200, { online: false, since: null });
    const ended = s("ended", 400, { online: false, since: 50 }, { status: "ended" } as Partial<SessionInfo>);
    expect(needsYou(lost)).toBe("the agent's bridge was lost");
    expect(needsYou(never)).toBeNull();
    expect(needsYou(ended)).toBeNull();
    expect(sortForList([fine, lost, never, ended]).map((x) => x.name)).toEqual(["lost", "ended", "fine", "never"]);
  });
});

group("entries waiting on the machine", () => {
  it("are shown next to an online agent only while there are some", () => {
    const waiting = (n: number): AgentSeen => ({ ...online, spooled: n });
    expect(say(run(initial(true, 0), stream(live, 1), agent(waiting(3), 2))).agent.text).toBe(
      "Agent online · idle, waiting for a prompt · 3 entries waiting on the machine",
    );
    expect(say(run(initial(true, 0), stream(live, 1), agent(waiting(1), 2))).agent.text).toMatch(/· 1 entry waiting on the machine$/);
    expect(say(run(initial(true, 0), stream(live, 1), agent(waiting(0), 2))).agent.text).toBe("Agent online · idle, waiting for a prompt");
    expect(say(run(initial(true, 0), stream(live, 1), agent(online, 2))).agent.text).not.toMatch(/waiting on the machine/);
  });
  it("are not vouched for while the page's own stream is down", () => {
    const s = run(initial(true, 0), stream(live, 1), agent({ ...online, spooled: 3 }, 2), stream(dropped(), 3));
    expect(say(s).agent.text).not.toMatch(/waiting on the machine/);
  });
});
