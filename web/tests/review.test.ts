// The review's pure parts: which checkpoints bound a turn, what each diff line is, and the
// small tokenizer that highlights it.
import { describe, expect, it } from "vitest";
import type { Entry } from "../src/protocol/Entry";
import { classify, filesText, langOf, tokenize, turnAt, turnsOf, utf8Bytes } from "../src/views/review";

let seq = 0;
const e = (kind: string, payload: unknown = {}): Entry => ({ seq: ++seq, ts: 0, kind, author: "bridge", payload: payload as Entry["payload"] });
const cp = (id: string) => e("checkpoint.created", { id, created_at: 0, reason: "tool", files: [], files_total: 0 });

describe("turnsOf", () => {
  it("bounds a turn by the last checkpoint before its prompt and the last one before the next prompt", () => {
    seq = 0;
    const log = [
      e("agent.start"),
      cp("a"), // start: uncommitted changes were there
      e("input.text", { text: "first" }), // 3
      e("agent.tool_use", { id: "t1", name: "Edit" }),
      e("agent.tool_result", { tool_use_id: "t1" }),
      e("agent.result", {}), // 6
      cp("b"), // the last edit's checkpoint lands after the result
      e("input.text", { text: "second" }), // 8
      e("agent.result", {}), // 9: read-only, no checkpoint
      e("input.text", { text: "third" }), // 10
      cp("c"),
      e("agent.result", {}), // 12
      cp("d"),
    ];
    const turns = turnsOf(log, true);
    expect(turns).toEqual([
      { start: 3, result: 6, from: "a", to: "b" },
      { start: 8, result: 9, from: "b", to: null },
      { start: 10, result: 12, from: "b", to: "d" },
    ]);
    expect(turnAt(turns, 6)).toBe(turns[0]);
    expect(turnAt(turns, 3)).toBe(turns[0]);
    expect(turnAt(turns, 9)).toBeNull(); // nothing changed
    expect(turnAt(turns, 12)?.to).toBe("d");
    expect(turnAt(turns, 4)).toBeNull();
  });

  it("starts at the base commit only when the entries held begin the log", () => {
    seq = 0;
    const log = [e("input.text", { text: "go" }), cp("x")];
    expect(turnsOf(log, true)[0]).toMatchObject({ from: null, to: "x" });
    expect(turnsOf(log, false)[0]).toMatchObject({ from: undefined, to: "x" });
  });

  it("ends a turn of an agent that writes no result at the next prompt", () => {
    seq = 0;
    const log = [e("input.text", { text: "one" }), cp("p"), cp("q"), e("input.text", { text: "two" }), cp("r")];
    expect(turnsOf(log, true)).toEqual([
      { start: 1, result: null, from: null, to: "q" },
      { start: 4, result: null, from: "q", to: "r" },
    ]);
  });
});

describe("diff lines", () => {
  it("classifies hunk headers, added, removed, context and notes", () => {
    expect(["@@ -1,2 +1,3 @@", "+new", "-old", " same", "\\ No newline at end of file", ""].map(classify)).toEqual(["hunk", "add", "del", "ctx", "note", "ctx"]);
  });

  it("picks a tokenizer by extension", () => {
    expect(langOf("src/main.rs")).toBe("c");
    expect(langOf("web/a.test.ts")).toBe("c");
    expect(langOf("scripts/run.sh")).toBe("hash");
    expect(langOf("Makefile")).toBe("hash");
    expect(langOf("notes.txt")).toBe("plain");
    expect(langOf("README")).toBe("plain");
  });

  it("highlights keywords, strings, numbers and comments", () => {
    const toks = tokenize('let s = "a \\" b"; // done', "c");
    expect(toks).toEqual([
      { k: "kw", s: "let" },
      { k: "txt", s: " s = " },
      { k: "str", s: '"a \\" b"' },
      { k: "txt", s: "; " },
      { k: "com", s: "// done" },
    ]);
    expect(tokenize("x = 42 # the answer", "hash")).toEqual([
      { k: "txt", s: "x = " },
      { k: "num", s: "42" },
      { k: "txt", s: " " },
      { k: "com", s: "# the answer" },
    ]);
    expect(tokenize("a /* b */ return", "c").map((t) => t.k)).toEqual(["txt", "com", "txt", "kw"]);
    expect(tokenize("fn # not a comment here", "plain")).toEqual([{ k: "txt", s: "fn # not a comment here" }]);
  });

  it("counts bytes as the server pages them, and files in words", () => {
    expect(utf8Bytes("é+\n")).toBe(4);
    expect(filesText(1)).toBe("1 file changed");
    expect(filesText(3)).toBe("3 files changed");
  });
});
