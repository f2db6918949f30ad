import { describe, expect, it, vi } from "vitest";
import { badge, markTurnsSeen, needOf, needsYou, seenTurns, sortForList, titleFor } from "../src/needs";
import type { SessionInfo } from "../src/protocol/SessionInfo";
import type { SessionState } from "../src/protocol/SessionState";
import { ListDetails, MAX_DETAILED, setNeedCount, setTitle, watchNeeds } from "../src/attention";

const info = (name: string, extra: Partial<SessionInfo> = {}, bridge: Partial<SessionInfo["bridge"]> = {}): SessionInfo =>
  ({
    id: name,
    name,
    created_at: 0,
    head_seq: 10,
    last_activity: 100,
    status: "live",
    bridge: { online: true, since: 1, last_close_code: null, last_reason: null, ...bridge },
    ...extra,
  }) as unknown as SessionInfo;

type Agent = Partial<SessionState["agent"]>;
const state = (over: { phase?: SessionState["phase"]; agent?: Agent; finished?: boolean; turns?: number; pending?: number } = {}): SessionState =>
  ({
    phase: over.phase ?? "idle",
    agent: { running: true, exit_code: null, exit_signal: null, stalled: false, adapter: "claude", capabilities: null, last_output_at: null, ...over.agent },
    turn: { prompt: null, partial_text: "", finished: over.finished ?? false },
    counts: { entries: 0, tool_calls: 0, turns: over.turns ?? 0, errors: 0, unknown_kinds: 0, malformed: 0, interruptions: 0 },
    pending_permissions: Array.from({ length: over.pending ?? 0 }, (_, i) => ({ request_id: `r${i}`, tool_name: "Bash", tool_use_id: null, path: null, seq: 1 })),
  }) as unknown as SessionState;

const memory = () => {
  const m = new Map<string, string>();
  return { getItem: (k: string) => m.get(k) ?? null, setItem: (k: string, v: string) => void m.set(k, v) };
};

describe("needs you", () => {
  it("a pending decision", () => {
    expect(needOf(info("a"), state({ phase: "awaiting_permission", pending: 1 }), 0)).toEqual({ need: "decision", text: "waiting for your decision" });
  });

  it("a finished turn not yet seen on this device, and no more once seen", () => {
    const s = state({ finished: true, turns: 3 });
    expect(needOf(info("a"), s, 2)).toEqual({ need: "turn-unseen", text: "finished its turn: not seen yet" });
    expect(needOf(info("a"), s, 3)).toBeNull();
    // A turn under way, or an agent without turns, is not a finished turn.
    expect(needOf(info("a"), state({ phase: "model_streaming", finished: false, turns: 3 }), 2)).toBeNull();
    expect(needOf(info("a"), state({ finished: true, turns: 3, agent: { adapter: "pty" } }), 0)).toBeNull();
  });

  it("a stalled agent, a crashed one, a lost bridge", () => {
    expect(needOf(info("a"), state({ agent: { stalled: true } }), 0)?.need).toBe("stalled");
    expect(needOf(info("a"), state({ agent: { running: false, exit_code: 1 } }), 0)).toEqual({ need: "crashed", text: "the agent exited with code 1" });
    expect(needOf(info("a"), state({ agent: { running: false, exit_signal: 9 } }), 0)).toEqual({ need: "crashed", text: "the agent was killed (signal 9)" });
    expect(needOf(info("a"), state({ agent: { running: false, exit_code: 0 } }), 0)).toBeNull();
    expect(needOf(info("a", {}, { online: false, since: 50 }), null, 0)).toEqual({ need: "bridge-lost", text: "the agent's bridge was lost" });
    // Never connected is not lost; an ended session needs nobody.
    expect(needOf(info("a", {}, { online: false, since: null }), null, 0)).toBeNull();
    expect(needOf(info("a", { status: "ended" } as Partial<SessionInfo>), state({ phase: "awaiting_permission", pending: 1 }), 0)).toBeNull();
  });

  it("claims nothing from a state it does not have", () => {
    expect(needOf(info("a"), null, 0)).toBeNull();
    expect(needsYou(info("a"))).toBeNull();
  });

  it("sorts the most urgent first, then by activity", () => {
    const needs: Record<string, ReturnType<typeof needOf>> = {};
    const list = [info("fine", { last_activity: 900 }), info("turn", { last_activity: 800 }), info("lost", { last_activity: 100 }), info("decide", { last_activity: 50 }), info("old", { last_activity: 10 })];
    needs.turn = needOf(list[1], state({ finished: true, turns: 1 }), 0);
    needs.lost = { need: "bridge-lost", text: "" };
    needs.decide = needOf(list[3], state({ phase: "awaiting_permission", pending: 1 }), 0);
    expect(sortForList(list, (s) => needs[s.name]?.need ?? null).map((s) => s.name)).toEqual(["decide", "lost", "turn", "fine", "old"]);
  });

  it("remembers the turns seen, never going back", () => {
    const store = memory();
    expect(seenTurns("s", store)).toBe(0);
    markTurnsSeen("s", 4, store);
    markTurnsSeen("s", 2, store);
    expect(seenTurns("s", store)).toBe(4);
    store.setItem("moor.seen-turns.t", "garbage");
    expect(seenTurns("t", store)).toBe(0);
  });

  it("counts them in the title and the app badge", () => {
    expect(titleFor(0)).toBe("Mooring");
    expect(titleFor(2)).toBe("(2) Mooring");
    expect(titleFor(2, "Mooring", false)).toBe("(2?) Mooring");
    expect(titleFor(0, "Mooring", false)).toBe("(?) Mooring");
    const calls: string[] = [];
    const nav = { setAppBadge: async (n: number) => void calls.push(`set ${n}`), clearAppBadge: async () => void calls.push("clear") } as unknown as Navigator;
    badge(3, nav);
    badge(0, nav);
    expect(calls).toEqual(["set 3", "clear"]);
    // Without the Badging API: nothing to call, nothing thrown.
    badge(1, {} as Navigator);
  });
});

describe("the list's session states", () => {
  it("asks for a live session's state once per head, forgets it on failure, and asks for at most MAX_DETAILED", async () => {
    const asked: string[] = [];
    let fail = false;
    const d = new ListDetails(async (id) => {
      asked.push(id);
      if (fail) throw new Error("down");
      return info(id, { head_seq: 10, state: state({ finished: true, turns: 1 }) } as Partial<SessionInfo>);
    });
    const sessions = [info("a"), info("b"), info("gone", { status: "ended" } as Partial<SessionInfo>)];
    expect(await d.refresh(sessions)).toBe(true);
    expect(asked.sort()).toEqual(["a", "b"]);
    expect(d.state("a")?.counts.turns).toBe(1);
    // Same heads: nothing asked again.
    expect(await d.refresh(sessions)).toBe(false);
    expect(asked.length).toBe(2);
    // The head moved and the request fails: the state is unknown, not the old one.
    fail = true;
    expect(await d.refresh([info("a", { head_seq: 11 }), info("b")])).toBe(true);
    expect(d.state("a")).toBeNull();
    expect(d.state("b")).not.toBeNull();
    fail = false;
    asked.length = 0;
    const many = Array.from({ length: MAX_DETAILED + 20 }, (_, i) => info(`s${i}`));
    await d.refresh(many);
    expect(asked.length).toBe(MAX_DETAILED);
  });
});

describe("the count outside the list", () => {
  it("keeps the title's and the badge's count current while a session is open, and only while the page is visible", async () => {
    vi.useFakeTimers();
    try {
      const listeners: (() => void)[] = [];
      const doc = {
        title: "",
        visibilityState: "visible" as DocumentVisibilityState,
        addEventListener: (_: string, f: () => void) => void listeners.push(f),
        removeEventListener: (_: string, f: () => void) => void listeners.splice(listeners.indexOf(f), 1),
      };
      const badges: number[] = [];
      const nav = { setAppBadge: async (n: number) => void badges.push(n), clearAppBadge: async () => void badges.push(0) } as unknown as Navigator;
      setTitle("work · Mooring", doc);
      setNeedCount(0, doc, nav);
      expect(doc.title).toBe("work · Mooring");
      // Another session waits on a decision; the open one does not.
      let sessions = [info("work"), info("other", { head_seq: 11 })];
      let fail = false;
      let asked = 0;
      const details = new ListDetails(async (id) => info(id, { state: id === "other" ? state({ phase: "awaiting_permission", pending: 1 }) : state() } as Partial<SessionInfo>));
      const list = async () => {
        asked += 1;
        if (fail) throw new Error("offline");
        return sessions;
      };
      const stop = watchNeeds({ every: 1000, list, details, doc, nav, seen: () => 0 });
      await vi.advanceTimersByTimeAsync(0);
      expect(doc.title).toBe("(1) work · Mooring");
      expect(badges.at(-1)).toBe(1);
      // The view's own title change keeps the count in front.
      setTitle("work2 · Mooring", doc);
      expect(doc.title).toBe("(1) work2 · Mooring");
      // Unreachable: the title says the count is the last known, not a current one, also
      // after the view changes its title.
      fail = true;
      await vi.advanceTimersByTimeAsync(1000);
      expect(doc.title).toBe("(1?) work2 · Mooring");
      setTitle("work3 · Mooring", doc);
      expect(doc.title).toBe("(1?) work3 · Mooring");
      // Hidden: no requests; visible again: one at once, with the decision answered.
      doc.visibilityState = "hidden";
      const before = asked;
      await vi.advanceTimersByTimeAsync(5000);
      expect(asked).toBe(before);
      fail = false;
      sessions = [info("work"), info("other", { head_seq: 12 })];
      details.refresh = async () => false;
      doc.visibilityState = "visible";
      listeners.forEach((f) => f());
      await vi.advanceTimersByTimeAsync(0);
      expect(asked).toBe(before + 1);
      expect(doc.title).toBe("(1) work3 · Mooring");
      stop();
      const stopped = asked;
      await vi.advanceTimersByTimeAsync(5000);
      expect(asked).toBe(stopped);
      expect(listeners.length).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
