import { describe, expect, it } from "vitest";
import { ItemModel } from "../src/items";
import { EntryWindow } from "../src/window";
import { typed } from "../src/entries";
import type { Entry } from "../src/protocol/Entry";
import { entries_page, entry_body_list, reset, session_info } from "./fixtures.gen";

// The golden encodings are checked against the generated types by tsc (fixtures.gen.ts gives
// each its type); here the client's own code runs on them.
describe("golden encodings from moord", () => {
  it("a page of entries fills the window and the transcript", () => {
    const w = new EntryWindow(entries_page.entries.length);
    expect(w.prepend(entries_page.entries, entries_page.has_more).length).toBe(entries_page.entries.length);
    const m = new ItemModel();
    m.apply(w.entries);
    expect(m.items.length).toBeGreaterThan(0);
  });

  it("a session carries its state and a reset its head", () => {
    expect(session_info.state?.head).toBe(session_info.head_seq);
    expect(reset.head_seq).toBe(session_info.head_seq);
  });

  it("typed entries the bridge produced narrow to their kind and fill the transcript", () => {
    const entries: Entry[] = entry_body_list.map((b, i) => ({ seq: i + 1, ts: i, author: "bridge", kind: b.kind, payload: b.payload as Entry["payload"] }));
    expect(entries.every((e) => typed(e)?.kind === e.kind)).toBe(true);
    const m = new ItemModel();
    m.apply(entries);
    const tools = m.items.filter((it) => it.t === "tool");
    expect(tools.length).toBe(2);
    expect(tools.every((t) => t.t === "tool" && t.status !== "running")).toBe(true);
    expect(m.items.some((it) => it.t === "perm")).toBe(true);
    expect(m.items.some((it) => it.t === "raw")).toBe(false);
  });

  it("an entry of a kind nobody types is kept and shown raw", () => {
    const e: Entry = { seq: 1, ts: 0, author: "bridge", kind: "agent.future_thing", payload: { anything: [1, 2] } };
    expect(typed(e)).toBeNull();
    const m = new ItemModel();
    m.apply([e]);
    expect(m.items).toMatchObject([{ t: "raw", kind: "agent.future_thing", payload: { anything: [1, 2] } }]);
  });
});
