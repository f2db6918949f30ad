// What the session is doing, in words, saying only what the agent's adapter can know: an agent
// with turns (Claude Code) has phases; a lines or PTY agent is running or exited, with the time
// of its last output, and is never "idle, waiting for a prompt".
import type { SessionState } from "./protocol/SessionState";

export const PHASE_TEXT: Record<string, string> = {
  idle: "idle, waiting for a prompt",
  model_streaming: "the model is answering",
  tool_running: "a tool is running",
  awaiting_permission: "waiting for a permission decision",
  interrupted: "interrupted",
  ended: "ended",
};

/** Whether the agent reports turns: as its adapter declared, else by the adapter's name. */
export function hasTurns(s: SessionState): boolean {
  const caps = s.agent.capabilities;
  if (caps) return caps.turns;
  return s.agent.adapter !== "lines" && s.agent.adapter !== "pty";
}

/** "last output 3 s ago" (seconds below two minutes, then minutes), or "" without output. */
export function lastOutput(s: SessionState, now: number): string {
  const at = s.agent.last_output_at;
  if (at === null || at === undefined) return "";
  const secs = Math.max(0, Math.round((now - Number(at)) / 1000));
  return secs < 120 ? `last output ${secs} s ago` : `last output ${Math.round(secs / 60)} min ago`;
}

/** The phase line for `s` at `now` (ms). */
export function phaseText(s: SessionState, now: number = Date.now()): string {
  if (hasTurns(s) || (s.phase !== "idle" && s.phase !== "model_streaming")) {
    return PHASE_TEXT[s.phase] ?? s.phase;
  }
  let status = s.agent.running ? "running" : "exited";
  // Only a shell's terminal tells whether it waits (the adapter said so in agent.start).
  const terminal = s.agent.terminal;
  if (s.agent.running && s.agent.capabilities?.terminal_wait && terminal) {
    status = terminal.waiting ? "waiting at its prompt" : `running ${terminal.foreground || "a command"}`;
  }
  const parts = [status];
  const output = lastOutput(s, now);
  if (output) parts.push(output);
  return parts.join(" · ");
}
