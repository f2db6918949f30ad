import "fake-indexeddb/auto";
import { describe, expect, it } from "vitest";
import { contiguousTail, ENTRY_MAX_BYTES, WINDOW_ENTRIES, WINDOW_SESSIONS, WindowCache } from "../src/cache";
import type { Compacted } from "../src/protocol/Compacted";
import type { Entry } from "../src/protocol/Entry";
import type { SessionInfo } from "../src/protocol/SessionInfo";

const entry = (seq: number): Entry => ({ seq, ts: seq, kind: "agent.output", author: "bridge", payload: { text: `line-${seq}`, stream: "stdout" } as Entry["payload"] });
const run = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => entry(from + i));
let n = 0;
const open = async () => (await WindowCache.open(`test-${++n}`)) as WindowCache;
const meta = (session: string, at: number) => ({ session, info: { id: session, name: session } as unknown as SessionInfo, state: null, at });
const mark = (through: number): Compacted => ({ after: 0, through, kinds: ["agent.pty.output", "agent.text.delta"], entries: 3, bytes: 300 });

describe("contiguousTail", () => {
  it("keeps the newest contiguous run, at most max", () => {
    expect(contiguousTail([entry(3), entry(1), entry(2)]).map((e) => e.seq)).toEqual([1, 2, 3]);
    expect(contiguousTail([entry(1), entry(2), entry(5), entry(6)]).map((e) => e.seq)).toEqual([5, 6]);
    expect(contiguousTail(run(1, 10), 4).map((e) => e.seq)).toEqual([7, 8, 9, 10]);
    expect(contiguousTail([])).toEqual([]);
  });

  it("takes gaps a compaction mark explains, not those above it, nor a cut", () => {
    const gappy = [entry(1), entry(2), entry(5), entry(9), entry(10)];
    expect(contiguousTail(gappy).map((e) => e.seq)).toEqual([9, 10]);
    expect(contiguousTail(gappy, WINDOW_ENTRIES, mark(4)).map((e) => e.seq)).toEqual([9, 10]); // 6..8 are above it
    expect(contiguousTail([entry(1), entry(2), entry(5), entry(6)], WINDOW_ENTRIES, mark(4)).map((e) => e.seq)).toEqual([1, 2, 5, 6]);
    expect(contiguousTail(gappy, WINDOW_ENTRIES, mark(8)).map((e) => e.seq)).toEqual([1, 2, 5, 9, 10]);
    expect(contiguousTail(gappy, 2, mark(8)).map((e) => e.seq)).toEqual([9, 10]);
    // An entry too large to keep, even below the mark: the run stops there.
    expect(contiguousTail([entry(1), { seq: 3, cut: true }, entry(5), entry(9)], WINDOW_ENTRIES, mark(8)).map((e) => e.seq)).toEqual([5, 9]);
    // A cut at the top: the run below it (the stream fetches that entry again).
    expect(contiguousTail([entry(5), entry(9), { seq: 10, cut: true }], WINDOW_ENTRIES, mark(8)).map((e) => e.seq)).toEqual([5, 9]);
  });
});

describe("WindowCache", () => {
  it("gives back what it stored, from both ends, with its meta", async () => {
    const c = await open();
    expect(await c.load("s")).toBeNull();
    await c.saveMeta(meta("s", 7));
    await c.add("s", run(101, 200), 200);
    await c.add("s", run(51, 100), 200);
    await c.add("s", run(201, 210), 210);
    const w = await c.load("s");
    expect(w?.meta.at).toBe(7);
    expect(w?.entries.map((e) => e.seq)).toEqual(run(51, 210).map((e) => e.seq));
    expect(w?.entries[0]).toEqual(entry(51));
  });

  it("keeps at most WINDOW_ENTRIES, the newest", async () => {
    const c = await open();
    await c.saveMeta(meta("s", 1));
    await c.add("s", run(1, WINDOW_ENTRIES), WINDOW_ENTRIES);
    await c.add("s", run(WINDOW_ENTRIES + 1, WINDOW_ENTRIES + 500), WINDOW_ENTRIES + 500);
    const w = await c.load("s");
    expect(w?.entries.length).toBe(WINDOW_ENTRIES);
    expect(w?.entries[0].seq).toBe(501);
    expect(w?.entries[w.entries.length - 1].seq).toBe(WINDOW_ENTRIES + 500);
  }, 60000);

  it("keeps at most WINDOW_SESSIONS sessions, dropping the least recent with its entries", async () => {
    const c = await open();
    for (let i = 0; i < WINDOW_SESSIONS + 2; i++) {
      await c.add(`s${i}`, run(1, 3), 3);
      await c.saveMeta(meta(`s${i}`, 1000 + i));
    }
    expect(await c.load("s0")).toBeNull();
    expect(await c.load("s1")).toBeNull();
    expect((await c.load(`s${WINDOW_SESSIONS + 1}`))?.entries.length).toBe(3);
  });

  it("reads the newest part first, then the rest right below it, only while contiguous", async () => {
    const c = await open();
    expect(await c.loadTail("s", 10)).toBeNull();
    await c.saveMeta(meta("s", 3));
    expect(await c.loadTail("s", 10)).toEqual({ meta: meta("s", 3), entries: [] });
    await c.add("s", run(1, 100), 100);
    // Another session's rows around it are never read.
    await c.add("r", run(1, 300), 300);
    const tail = await c.loadTail("s", 10);
    expect(tail?.meta.at).toBe(3);
    expect(tail?.entries.map((e) => e.seq)).toEqual(run(91, 100).map((e) => e.seq));
    expect(tail?.entries[0]).toEqual(entry(91));
    const rest = await c.loadBefore("s", 91, 1000);
    expect(rest.map((e) => e.seq)).toEqual(run(1, 90).map((e) => e.seq));
    expect((await c.loadBefore("s", 91, 20)).map((e) => e.seq)).toEqual(run(71, 90).map((e) => e.seq));
    expect(await c.loadBefore("s", 1, 10)).toEqual([]);
    // A hole right below: nothing (the window below is not contiguous with what is shown).
    await c.add("h", [...run(1, 5), ...run(8, 20)], 20);
    await c.saveMeta(meta("h", 1));
    expect((await c.loadTail("h", 10))?.entries.map((e) => e.seq)).toEqual(run(11, 20).map((e) => e.seq));
    expect((await c.loadBefore("h", 11, 100)).map((e) => e.seq)).toEqual(run(8, 10).map((e) => e.seq));
    expect(await c.loadBefore("h", 7, 100)).toEqual([]);
    // A tail with a hole in it: its newest contiguous run.
    expect((await c.loadTail("h", 15))?.entries.map((e) => e.seq)).toEqual(run(8, 20).map((e) => e.seq));
  });

  it("forgets a session entirely, or only its entries", async () => {
    const c = await open();
    await c.saveMeta(meta("a", 1));
    await c.add("a", run(1, 5), 5);
    await c.saveMeta(meta("b", 1));
    await c.add("b", run(1, 5), 5);
    await c.clearEntries("a");
    expect((await c.load("a"))?.entries).toEqual([]);
    await c.forget("b");
    expect(await c.load("b")).toBeNull();
  });

  it("gives back a window with compacted gaps, as far as the stored mark explains them", async () => {
    const c = await open();
    const kept = [...run(1, 3), entry(7), entry(12), ...run(20, 25)];
    await c.add("s", kept, 25);
    await c.saveMeta(meta("s", 1));
    // No mark stored (a window from before compaction): cut at the newest gap.
    expect((await c.load("s"))?.entries.map((e) => e.seq)).toEqual(run(20, 25).map((e) => e.seq));
    await c.saveMeta({ ...meta("s", 2), compacted: mark(19) });
    const w = await c.load("s");
    expect(w?.meta.compacted).toEqual(mark(19));
    expect(w?.entries.map((e) => e.seq)).toEqual(kept.map((e) => e.seq));
    // The first screen, then the rest below it across the gaps.
    const tail = await c.loadTail("s", 10);
    expect(tail?.entries.map((e) => e.seq)).toEqual(run(20, 25).map((e) => e.seq));
    expect((await c.loadBefore("s", 20, 100)).map((e) => e.seq)).toEqual([]);
    expect((await c.loadBefore("s", 20, 100, mark(19))).map((e) => e.seq)).toEqual([1, 2, 3, 7, 12]);
    expect((await c.loadBefore("s", 20, 100, mark(10))).map((e) => e.seq)).toEqual([]);
  });

  it("stores an entry too large to keep as a cut that no restored run crosses", async () => {
    const c = await open();
    const big: Entry = { ...entry(5), payload: { text: "x".repeat(ENTRY_MAX_BYTES + 1), stream: "stdout" } as Entry["payload"] };
    await c.add("s", [...run(1, 4), big, entry(6), entry(9)], 9);
    await c.saveMeta({ ...meta("s", 1), compacted: mark(8) });
    expect((await c.load("s"))?.entries.map((e) => e.seq)).toEqual([6, 9]);
    expect(await c.loadBefore("s", 6, 100, mark(8))).toEqual([]);
    expect((await c.loadBefore("s", 5, 100, mark(8))).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
  });
});
