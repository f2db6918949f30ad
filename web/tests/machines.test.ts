import { describe, expect, it } from "vitest";
import type { MachineInfo } from "../src/protocol/MachineInfo";
import { linkText, needsYouCount, sessionText } from "../src/views/machines";

const link = (online: boolean, since: number | null) => ({ online, since, last_close_code: null, last_reason: null });

describe("machines", () => {
  it("says online only while the lease is held, else unknown since", () => {
    expect(linkText(link(true, 1)).text).toBe("online");
    expect(linkText(link(false, null)).text).toMatch(/^unknown/);
    expect(linkText(link(false, Date.UTC(2026, 0, 1, 12, 4))).text).toMatch(/^unknown since /);
  });

  it("names a session's state and counts what waits on a person", () => {
    const base = { name: "s", project: "p", agent: "a", created_at: 0, ended: false, needs_you: 0 };
    expect(sessionText({ ...base }).text).toBe("starting");
    expect(sessionText({ ...base, bridge: link(true, 1), phase: "awaiting_permission" }).text).toBe("awaiting permission");
    expect(sessionText({ ...base, bridge: link(false, 5) }).cls).toBe("bad");
    expect(sessionText({ ...base, ended: true, needs_you: 2 }).text).toBe("ended");
    const m = { sessions: [{ ...base, needs_you: 2 }, { ...base, ended: true, needs_you: 3 }] } as unknown as MachineInfo;
    expect(needsYouCount(m)).toBe(2);
  });
});
