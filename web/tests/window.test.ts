import { describe, expect, it } from "vitest";
import type { Entry } from "../src/protocol/Entry";
import { EntryWindow, GapError } from "../src/window";

const e = (seq: number): Entry => ({ seq, ts: seq, kind: "agent.output", author: "bridge", payload: { text: `line-${seq}` } });
const range = (a: number, b: number) => Array.from({ length: b - a + 1 }, (_, i) => e(a + i));

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
});
