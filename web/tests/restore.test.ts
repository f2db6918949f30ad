import { afterEach, describe, expect, it, vi } from "vitest";
import { api } from "../src/api";
import { outcomeReader } from "../src/views/restore";

const entry = (seq: number, kind: string, payload: Record<string, unknown>) => ({ seq, ts: 0, kind, author: "bridge", payload });

afterEach(() => vi.restoreAllMocks());

describe("outcomeReader", () => {
  it("pages forward past other entries to the action's answer, reading each entry once", async () => {
    const log = [
      entry(11, "input.delivered", { input_seq: 10 }),
      ...Array.from({ length: 250 }, (_, i) => entry(12 + i, "host.session.started", { input_seq: 5 })),
      entry(262, "host.checkpoint.restored", { input_seq: 10, branch: "rescue", commit: "0123456789abcdef", project: "notes" }),
    ];
    const asked: number[] = [];
    vi.spyOn(api, "entriesAfter").mockImplementation(async (_id: string, after: number, limit: number) => {
      asked.push(after);
      const rest = log.filter((e) => e.seq > after);
      return { entries: rest.slice(0, limit), head_seq: 262, has_more: rest.length > limit } as never;
    });
    const read = outcomeReader("machine-log", 10);
    expect(await read()).toEqual({ ok: true, text: "Branch rescue now holds this checkpoint (commit 0123456789ab) in project notes." });
    expect(asked).toEqual([10, 210]);
  });

  it("says where the machine checked the branch out when it made a worktree", async () => {
    const log = [entry(12, "host.checkpoint.restored", { input_seq: 10, branch: "fix/rescue", commit: "0123456789abcdef", project: "notes", worktree: "/state/worktrees/notes/fix+rescue" })];
    vi.spyOn(api, "entriesAfter").mockImplementation(async () => ({ entries: log, head_seq: 12, has_more: false }) as never);
    expect(await outcomeReader("machine-log", 10)()).toEqual({
      ok: true,
      text: "Branch fix/rescue now holds this checkpoint (commit 0123456789ab) in project notes. It is checked out in the worktree /state/worktrees/notes/fix+rescue.",
    });
  });

  it("answers null until the machine answers, then the failure with its reason", async () => {
    const log = [entry(11, "input.delivered", { input_seq: 10 })];
    const asked: number[] = [];
    vi.spyOn(api, "entriesAfter").mockImplementation(async (_id: string, after: number) => {
      asked.push(after);
      return { entries: log.filter((e) => e.seq > after), head_seq: 11, has_more: false } as never;
    });
    const read = outcomeReader("machine-log", 10);
    expect(await read()).toBeNull();
    log.push(entry(12, "input.failed", { input_seq: 10, reason: "a branch named 'rescue' already exists" }));
    expect(await read()).toEqual({ ok: false, text: "Not restored: a branch named 'rescue' already exists" });
    expect(asked).toEqual([10, 11]);
  });
});
