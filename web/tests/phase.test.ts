import { describe, expect, it } from "vitest";
import { phaseText } from "../src/phase";
import type { SessionState } from "../src/protocol/SessionState";

const state = (agent: Partial<SessionState["agent"]>, phase: SessionState["phase"] = "idle"): SessionState =>
  ({ phase, agent: { running: true, capabilities: null, last_output_at: null, adapter: null, ...agent } }) as unknown as SessionState;

describe("phaseText", () => {
  it("gives an agent without turns running and its last output, never waiting for a prompt", () => {
    const lines = state({ adapter: "lines", capabilities: { turns: false, output_activity: true, terminal_wait: false }, last_output_at: 7000 });
    expect(phaseText(lines, 10_000)).toBe("running · last output 3 s ago");
    expect(phaseText(state({ adapter: "pty", running: false }), 0)).toBe("exited");
  });
  it("says whether a shell waits at its prompt, and only for a shell", () => {
    const caps = { turns: false, output_activity: true, terminal_wait: true };
    const at = (waiting: boolean, foreground: string) => ({ waiting, foreground, pid: 7 });
    expect(phaseText(state({ adapter: "pty", capabilities: caps, terminal: at(true, "bash") }), 0)).toBe("waiting at its prompt");
    expect(phaseText(state({ adapter: "pty", capabilities: caps, terminal: at(false, "make") }), 0)).toBe("running make");
    const vim = { ...caps, terminal_wait: false };
    expect(phaseText(state({ adapter: "pty", capabilities: vim, terminal: at(true, "vim") }), 0)).toBe("running");
    expect(phaseText(state({ adapter: "pty", running: false, capabilities: caps, terminal: at(true, "bash") }), 0)).toBe("exited");
  });
  it("gives Claude Code its phases", () => {
    expect(phaseText(state({ adapter: "claude" }, "model_streaming"))).toBe("the model is answering");
    expect(phaseText(state({ adapter: "claude" }))).toBe("idle, waiting for a prompt");
  });
});
