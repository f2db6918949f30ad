// Where log compaction left gaps, the page says so: the words, where in the transcript a notice
// goes (rendered into a minimal DOM, the tests run in node), and the line in a PTY session's
// terminal (xterm.js replaced by a recorder).
import { describe, expect, it, vi } from "vitest";
import { bytesText, compactedText } from "../src/compaction";
import { ItemModel, type Item } from "../src/items";
import type { Compacted } from "../src/protocol/Compacted";
import type { Entry } from "../src/protocol/Entry";
import { renderItem } from "../src/views/render";
import { COMPACTED_LINE, Terminal } from "../src/views/terminal";

const written: string[] = [];
vi.mock("@xterm/xterm", () => ({
  Terminal: class {
    options = { fontSize: 13 };
    loadAddon() {}
    open() {}
    onData() {}
    reset() {
      written.length = 0;
    }
    resize() {}
    dispose() {}
    write(d: string | Uint8Array) {
      written.push(typeof d === "string" ? d : new TextDecoder().decode(d));
    }
  },
}));
vi.mock("@xterm/addon-fit", () => ({ FitAddon: class {} }));

class FakeNode {}
class FakeElement extends FakeNode {
  className = "";
  attrs = new Map<string, string>();
  kids: (FakeElement | string)[] = [];
  constructor(readonly tagName: string) {
    super();
  }
  setAttribute(k: string, v: string) {
    this.attrs.set(k, v);
  }
  addEventListener() {}
  append(...c: (FakeElement | string)[]) {
    this.kids.push(...c);
  }
  replaceChildren(...c: (FakeElement | string)[]) {
    this.kids = c;
  }
  get textContent(): string {
    return this.kids.map((k) => (typeof k === "string" ? k : k.textContent)).join("");
  }
}
const g = globalThis as Record<string, unknown>;
g.Node = FakeNode;
g.document = { createElement: (tag: string) => new FakeElement(tag) };
g.matchMedia = () => ({ matches: false });

const KINDS = ["agent.pty.output", "agent.text.delta"];
const mark = (through: number, entries = 1234, bytes = 3_250_000): Compacted => ({ after: 0, through, kinds: KINDS, entries, bytes });
const out = (seq: number, text = `line-${seq}`): Entry => ({ seq, ts: seq, kind: "agent.output", author: "bridge", payload: { text, stream: "stdout" } });
const pty = (seq: number, text: string): Entry => ({ seq, ts: seq, kind: "agent.pty.output", author: "bridge", payload: { data: btoa(text) } });
const keys = (seq: number): Entry => ({ seq, ts: seq, kind: "input.keys", author: "user:admin", payload: { text: "ls\r" } });
/** The transcript as kinds, a notice as `gap>after`. */
const shape = (items: Item[]) => items.map((it) => (it.t === "compacted" ? `gap>${it.after}` : `${it.t}@${it.seq}`));

describe("compaction notice", () => {
  it("says what was removed, up to where, and how much", () => {
    expect(compactedText(mark(812))).toBe("Terminal output and streamed text up to #812 were compacted on the server (1234 entries, 3.1 MiB)");
    expect(compactedText({ ...mark(9, 1, 512), kinds: ["agent.pty.output"] })).toBe("Terminal output up to #9 were compacted on the server (1 entry, 512 B)");
    expect(bytesText(1023)).toBe("1023 B");
    expect(bytesText(15 * 1024)).toBe("15 KiB");
  });

  it("goes where the entries have a gap the mark explains, once per stretch of gaps", () => {
    const m = new ItemModel();
    // 1..3 read before compaction (its output still held), then kept entries read after it.
    const entries = [out(1), pty(2, "a"), out(3), out(6), out(9), pty(30, "b"), out(31), out(40)];
    m.rebuild(entries, 0, mark(39));
    // 10..29 are a gap of the same stretch; the output held at 30 ends it, so 32..39 earn their own.
    expect(shape(m.items)).toEqual(["line@1", "line@3", "gap>3", "line@6", "line@9", "line@31", "gap>31", "line@40"]);
    // Live, the mark comes with a reset at the cursor (after 3), then the kept entries one by
    // one: the transcript comes out the same.
    const live = new ItemModel();
    live.rebuild(entries.slice(0, 3), 0, null);
    live.compact(mark(39));
    for (const e of entries.slice(3)) live.apply([e]);
    expect(shape(live.items)).toEqual(shape(m.items));
    // Without a mark, no gap is explained and nothing is claimed.
    const none = new ItemModel();
    none.rebuild(entries, 0, null);
    expect(shape(none.items)).toEqual(["line@1", "line@3", "line@6", "line@9", "line@31", "line@40"]);
  });

  it("says entries below the first are gone only when the window begins the log", () => {
    const m = new ItemModel();
    m.rebuild([out(5), out(6)], 0, mark(4));
    expect(shape(m.items)).toEqual(["gap>0", "line@5", "line@6"]);
    m.rebuild([out(5), out(6)], 4, mark(4));
    expect(shape(m.items)).toEqual(["line@5", "line@6"]);
  });

  it("goes at the end when a reset names a mark past the newest entry, and shows the newest mark", () => {
    const m = new ItemModel();
    m.rebuild([out(1), pty(2, "a"), out(3)], 0, null);
    const changed = m.compact(mark(20, 5));
    expect(shape(m.items)).toEqual(["line@1", "line@3", "gap>3"]);
    expect([...changed].map((it) => it.key)).toEqual(["c3"]);
    // The kept entries that follow the reset earn no second notice.
    m.apply([out(7), out(15)]);
    // Compaction moved on: the one notice shows the new totals.
    const moved = m.compact(mark(25, 8));
    expect(shape(m.items)).toEqual(["line@1", "line@3", "gap>3", "line@7", "line@15"]);
    const notice = m.items[2];
    expect([...moved]).toEqual([notice]);
    expect(notice.t === "compacted" && notice.mark.through).toBe(25);
    // The same mark again (a reconnect) changes nothing.
    expect(m.compact(mark(25, 8)).size).toBe(0);
  });

  it("is rendered as a note in the transcript", () => {
    const m = new ItemModel();
    m.rebuild([out(1), out(5)], 0, mark(4, 2, 2048));
    const row = renderItem(m.items[1], { canControl: false, deciding: new Map(), decide: () => {} }) as unknown as FakeElement;
    expect(row.className).toBe("item i-compacted");
    expect(row.attrs.get("data-after")).toBe("1");
    expect(row.attrs.has("data-seq")).toBe(false);
    expect(row.textContent).toBe("Terminal output and streamed text up to #4 were compacted on the server (2 entries, 2.0 KiB).");
  });
});

describe("Terminal and compaction", () => {
  const box = () => document.createElement("div");

  it("writes a line where compacted output is missing, between the output around it", () => {
    const t = new Terminal(box(), null);
    t.reload([pty(1, "one"), pty(2, "two"), keys(5), pty(9, "nine")], 0, mark(8));
    expect(written).toEqual(["one", "two", COMPACTED_LINE, "nine"]);
    // Live output after it, with no gap: nothing more is said.
    t.write([pty(10, "ten")]);
    expect(written.at(-1)).toBe("ten");
    expect(written.filter((w) => w === COMPACTED_LINE).length).toBe(1);
  });

  it("writes the line when a reset says output after the last written is gone", () => {
    const t = new Terminal(box(), null);
    t.reload([pty(1, "one")], 0, null);
    t.compact(mark(30));
    t.write([keys(12), pty(31, "back")]);
    expect(written).toEqual(["one", COMPACTED_LINE, "back"]);
    // Without a mark a reload claims nothing.
    t.reload([pty(1, "one"), pty(9, "nine")], 0, null);
    expect(written).toEqual(["one", "nine"]);
  });
});
