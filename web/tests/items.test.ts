import { describe, expect, it } from "vitest";
import { ItemModel } from "../src/items";
import type { Entry } from "../src/protocol/Entry";

let seq = 0;
const e = (kind: string, payload: unknown): Entry => ({ seq: ++seq, ts: 0, kind, author: "bridge", payload: payload as Entry["payload"] });

describe("ItemModel", () => {
  it("folds a Claude Code turn into bubbles and cards", () => {
    const m = new ItemModel();
    const input = e("input.text", { text: "fix it" });
    m.apply([
      input,
      e("input.delivered", { input_seq: input.seq }),
      e("input.applied", { input_seq: input.seq }),
      e("agent.text.delta", { message_id: "m1", index: 0, text: "Let me " }),
      e("agent.text.delta", { message_id: "m1", index: 0, text: "look." }),
      e("agent.text", { message_id: "m1", text: "Let me look." }),
      e("agent.tool_use", { id: "t1", name: "Edit", input: { file_path: "/a", old_string: "x", new_string: "y" }, path: "/a" }),
      e("agent.permission.request", { request_id: "r1", tool_name: "Edit", input: {}, path: "/a" }),
      e("agent.permission.resolved", { request_id: "r1", decision: "allow", by: "user:admin" }),
      e("agent.tool_result", { tool_use_id: "t1", is_error: false, summary: "ok" }),
      e("input.delivered", { input_seq: input.seq }), // late: never downgrades
      e("something.new", { x: 1 }),
    ]);
    const kinds = m.items.map((i) => i.t);
    expect(kinds).toEqual(["input", "text", "tool", "perm", "raw"]);
    const [inp, text, tool, perm] = m.items;
    expect(inp.t === "input" && inp.receipt).toBe("applied");
    expect(text.t === "text" && [text.text, text.final]).toEqual(["Let me look.", true]);
    expect(tool.t === "tool" && [tool.status, tool.result]).toEqual(["ok", "ok"]);
    expect(perm.t === "perm" && perm.decision).toBe("allow");
  });

  it("settles a dead agent's running tool and undecided request, whatever ends it", () => {
    for (const end of ["agent.start", "agent.exit", "agent.restart", "session.interrupted"]) {
      const m = new ItemModel();
      m.apply([
        e("agent.tool_use", { id: "t1", name: "Bash", input: { command: "make" } }),
        e("agent.permission.request", { request_id: "r1", tool_name: "Write", input: {}, path: "/a" }),
      ]);
      const [tool, perm] = m.items;
      const changed = m.apply([e(end, { command: ["claude"], code: 1, reason: "stalled", cause: "link", phase: "awaiting_permission" })]);
      expect(tool.t === "tool" && tool.status, end).toBe("interrupted");
      expect(perm.t === "perm" && perm.decision, end).toBe("expired");
      expect(changed.has(tool) && changed.has(perm), end).toBe(true);
    }
  });

  it("shows a checkpoint as a card and other checkpoint kinds as notes", () => {
    const m = new ItemModel();
    m.apply([
      e("checkpoint.created", { id: "00ff", reason: "tool_call", diffstat: { files: 1, insertions: 2, deletions: 0 }, files: [{ path: "a.rs", status: "added" }], files_total: 1 }),
      e("checkpoint.uploaded", { id: "00ff" }),
    ]);
    expect(m.items.map((i) => i.t)).toEqual(["checkpoint", "sys"]);
  });

  it("gives every agent line its own row", () => {
    const m = new ItemModel();
    m.apply(Array.from({ length: 50 }, (_, i) => e("agent.output", { stream: "stdout", text: `line-${i}` })));
    expect(m.items.length).toBe(50);
    expect(new Set(m.items.map((i) => i.key)).size).toBe(50);
  });
});

describe("keystrokes of a PTY session", () => {
  const key = (text: string, ts: number, author = "user:ann"): Entry => ({ seq: ++seq, ts, kind: "input.keys", author, payload: { text } as Entry["payload"] });

  it("fold into one line per burst: `echo hello` and Enter is one item, not eleven", () => {
    const m = new ItemModel();
    const typed = [..."echo hello"].map((c, i) => key(c, 1000 + i * 100));
    const enter = key("\r", 2200);
    m.apply([...typed, e("agent.pty.output", { data: "ZWNobw==" }), enter, e("input.applied", { input_seq: enter.seq })]);
    expect(m.items.length).toBe(1);
    const it0 = m.items[0];
    expect(it0.t === "input" && it0.text).toBe("typed echo hello ⏎");
    expect(it0.t === "input" && it0.receipt).toBe("applied");
    // After an Enter, a new burst.
    m.apply([key("l", 2300), key("s", 2400), key("\r", 2500)]);
    expect(m.items.map((i) => (i.t === "input" ? i.text : i.t))).toEqual(["typed echo hello ⏎", "typed ls ⏎"]);
  });

  it("starts a new burst after a pause or another author, and names control keys", () => {
    const m = new ItemModel();
    m.apply([key("a", 0), key("b", 100), key("c", 100 + 6000), key("d", 6200, "user:bob"), key("\u0003", 6300, "user:bob"), key("\u001b[A", 6400, "user:bob")]);
    expect(m.items.map((i) => (i.t === "input" ? `${i.author}: ${i.text}` : i.t))).toEqual(["user:ann: typed ab", "user:ann: typed c", "user:bob: typed d ^C ↑"]);
  });

  it("is the same whether the entries come one by one or after a rebuild", () => {
    const entries = [..."vim x"].map((c, i) => key(c, i)).concat(key("\u001b", 10), key(":wq\r", 20));
    const live = new ItemModel();
    for (const x of entries) live.apply([x]);
    const rebuilt = new ItemModel();
    rebuilt.rebuild(entries);
    expect(live.items.map((i) => i.t === "input" && i.text)).toEqual(rebuilt.items.map((i) => i.t === "input" && i.text));
    expect(live.items.map((i) => i.t === "input" && i.text)).toEqual(["typed vim x Esc :wq ⏎"]);
  });
});

describe("pendingDecision", () => {
  it("is the oldest request without a decision", async () => {
    const { pendingDecision } = await import("../src/items");
    const m = new ItemModel();
    m.apply([
      e("agent.permission.request", { request_id: "a", tool_name: "Bash", input: {} }),
      e("agent.permission.request", { request_id: "b", tool_name: "Edit", input: {} }),
    ]);
    expect(pendingDecision(m.items)?.t === "perm" && pendingDecision(m.items)?.requestId).toBe("a");
    m.apply([e("agent.permission.resolved", { request_id: "a", decision: "allow", by: "user:x" })]);
    expect(pendingDecision(m.items)?.requestId).toBe("b");
    m.apply([e("agent.exit", { code: 0 })]);
    expect(pendingDecision(m.items)).toBeNull();
  });
});
