import { describe, expect, it } from "vitest";
import { ItemModel } from "../src/items";
import { EntryWindow } from "../src/window";
import { entries_page, reset, session_info } from "./fixtures.gen";

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
});
