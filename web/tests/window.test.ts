import { describe, expect, it, vi } from "vitest";
import type { Compacted } from "../src/protocol/Compacted";
import type { Entry } from "../src/protocol/Entry";
import { EntryWindow, GapError, loadOlderPage } from "../src/window";

const e = (seq: number): Entry => ({ seq, ts: seq, kind: "agent.output", author: "bridge", payload: { text: `line-${seq}` } });
const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => e(a + i));
const seqs = (w: EntryWindow) => w.entries.map((x) => x.seq);
const mark = (through: number): Compacted => ({ after: 0, through, kinds: ["agent.pty.output", "agent.text.delta"], entries: 1, bytes: 1 });

describe("EntryWindow", () => {
  it("keeps a contiguous run: duplicates dropped, gaps refused", () => {
    const w = new EntryWindow(10);
    expect(w.hi).toBe(10);
    expect(w.append([e(9), e(10), e(11), e(12)]).map((x) => x.seq)).toEqual([11, 12]);
    expect(w.append([e(12), e(11)])).toEqual([]);
    expect(() => w.append([e(14)])).toThrow(GapError);
    // A batch with a gap keeps what came before the gap.
    expect(w.append([e(13), e(15)]).map((x) => x.seq)).toEqual([13]);
    expect(w.entries.map((x) => x.seq)).toEqual([11, 12, 13]);
  });

  it("pages older entries in below lo, only when they end right below it", () => {
    const w = new EntryWindow(100);
    w.append(range(101, 105));
    expect(w.prepend(range(50, 99), true)).toEqual([]); // does not reach 100
    expect(w.prepend(range(51, 100), true).length).toBe(50);
    expect(w.lo).toBe(51);
    expect(w.hasOlder).toBe(true);
    expect(w.prepend(range(1, 60), false).length).toBe(50); // overlap trimmed
    expect(w.entries.map((x) => x.seq)).toEqual(range(1, 105).map((x) => x.seq));
    expect(w.hasOlder).toBe(false);
  });

  it("takes live entries across a gap compaction explains, and only such a gap", () => {
    const w = new EntryWindow(10);
    w.append([e(11)]);
    expect(() => w.append([e(15)])).toThrow(GapError);
    w.noteCompacted(mark(14));
    expect(w.append([e(15), e(17)]).map((x) => x.seq)).toEqual([15]); // 16 is above the mark
    expect(() => w.append([e(17)])).toThrow(GapError);
    // A mark that does not reach as far changes nothing: the furthest wins.
    w.noteCompacted(mark(12));
    expect(w.compacted?.through).toBe(14);
    w.noteCompacted(mark(30));
    expect(w.append([e(17), e(29), e(31), e(32)]).map((x) => x.seq)).toEqual([17, 29, 31, 32]);
    expect(seqs(w)).toEqual([11, 15, 17, 29, 31, 32]);
  });

  it("pages in older entries with gaps, when compaction explains every one", () => {
    const w = new EntryWindow(100);
    w.append(range(101, 103));
    const page = [e(40), e(41), e(55), e(98)];
    // 42..54 and 99..100 missing, and nothing says why: not the page asked for.
    expect(w.prepend(page, true)).toEqual([]);
    w.noteCompacted(mark(99));
    expect(w.prepend(page, true)).toEqual([]); // 100 is above the mark
    w.noteCompacted(mark(100));
    expect(w.prepend(page, true).map((x) => x.seq)).toEqual([40, 41, 55, 98]);
    expect(w.lo).toBe(40);
    expect(w.hasOlder).toBe(true);
    expect(w.fromLogStart).toBe(false);
    // Nothing stored below 40, and 1..39 are all at or below the mark: the window begins the log.
    expect(w.prepend([], false)).toEqual([]);
    expect(w.hasOlder).toBe(false);
    expect(w.fromLogStart).toBe(true);
    expect(w.below).toBe(0);
    expect(seqs(w)).toEqual([40, 41, 55, 98, 101, 102, 103]);
  });

  it("an empty window anchored at the head takes the first kept entry past a compacted gap", () => {
    const w = new EntryWindow(50);
    w.noteCompacted(mark(60));
    expect(w.append([e(58)]).map((x) => x.seq)).toEqual([58]);
    expect(w.hi).toBe(58);
    // Kept across a re-anchor: the mark belongs to the log, not to the window.
    w.reset(70);
    expect(w.compacted?.through).toBe(60);
  });

  it("pages in across gaps a backwards page does not explain, once the server said how far compaction went", async () => {
    // Opened at the head (no reset came: the cursor was past the mark); the log below has gaps.
    const stored = [e(1), e(2), e(9), e(14), e(15)];
    const before = vi.fn(async (b: number) => {
      const rest = stored.filter((x) => x.seq < b);
      return { entries: rest.slice(-3), head_seq: 15, has_more: rest.length > 3 };
    });
    const w = new EntryWindow(15);
    const asked = vi.fn(async () => mark(13));
    const first = await loadOlderPage(w, { before, mark: asked });
    expect(first?.added.map((x) => x.seq)).toEqual([9, 14, 15]);
    expect(first?.mark?.through).toBe(13);
    expect(asked).toHaveBeenCalledTimes(1);
    // Known now: the next page is taken at once.
    const second = await loadOlderPage(w, { before, mark: asked });
    expect(second).toEqual({ added: [e(1), e(2)], mark: null });
    expect(asked).toHaveBeenCalledTimes(1);
    expect(seqs(w)).toEqual([1, 2, 9, 14, 15]);
    expect(w.hasOlder).toBe(false);
  });

  it("refuses a page whose gap the server does not explain either", async () => {
    const w = new EntryWindow(15);
    const got = await loadOlderPage(w, {
      before: async () => ({ entries: [e(9), e(14)], head_seq: 15, has_more: true }),
      mark: async () => mark(10),
    });
    expect(got?.added).toEqual([]);
    expect(w.entries).toEqual([]);
  });
});
