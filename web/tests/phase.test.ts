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
  it("gives Claude Code its phases", () => {
    expect(phaseText(state({ adapter: "claude" }, "model_streaming"))).toBe("the model is answering");
    expect(phaseText(state({ adapter: "claude" }))).toBe("idle, waiting for a prompt");
  });
});
