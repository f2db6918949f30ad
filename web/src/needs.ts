// "Needs you": which sessions wait on a person, and why, in words. From what the list carries
// (the bridge as the server sees it) and, where the page has it, the session's derived state as
// of a known head: a pending decision, a finished turn this device has not shown yet, a stalled
// or crashed agent. Nothing is claimed from a state the page does not have.

import { hasTurns } from "./phase";
import type { SessionInfo } from "./protocol/SessionInfo";
import type { SessionState } from "./protocol/SessionState";

/** What waits on a person, most urgent first (the order of the list's sort). */
export type Need = "decision" | "crashed" | "bridge-lost" | "stalled" | "turn-unseen";

const RANK: Record<Need, number> = { decision: 0, crashed: 1, "bridge-lost": 2, stalled: 3, "turn-unseen": 4 };

const seenKey = (id: string) => `moor.seen-turns.${id}`;

/** Turns of `id` this device has shown (finished turns counted by the server's fold). */
export function seenTurns(id: string, store: Pick<Storage, "getItem"> = localStorage): number {
  const n = Number(store.getItem(seenKey(id)) ?? 0);
  return Number.isFinite(n) && n > 0 ? n : 0;
}

/** Records that the page showed `id` with `turns` finished turns (never goes back). */
export function markTurnsSeen(id: string, turns: number, store: Pick<Storage, "getItem" | "setItem"> = localStorage): void {
  if (turns > seenTurns(id, store)) store.setItem(seenKey(id), String(turns));
}

/** Why `s` waits on a person, or null. `state`: the session's derived state, if known. */
export function needOf(s: SessionInfo, state: SessionState | null, seen: number): { need: Need; text: string } | null {
  if (s.status === "ended") return null;
  const st = state ?? s.state ?? null;
  if (st && (st.phase === "awaiting_permission" || st.pending_permissions.length > 0)) return { need: "decision", text: "waiting for your decision" };
  if (st && !st.agent.running && ((st.agent.exit_code !== null && st.agent.exit_code !== 0) || st.agent.exit_signal !== null)) {
    const text = st.agent.exit_signal !== null ? `the agent was killed (signal ${st.agent.exit_signal})` : `the agent exited with code ${st.agent.exit_code}`;
    return { need: "crashed", text };
  }
  if (!s.bridge.online && s.bridge.since !== null) return { need: "bridge-lost", text: "the agent's bridge was lost" };
  if (st?.agent.stalled && st.agent.running) return { need: "stalled", text: "the agent stalled: no output while it works" };
  if (st && hasTurns(st) && st.turn.finished && st.phase === "idle" && st.counts.turns > seen) {
    return { need: "turn-unseen", text: "finished its turn: not seen yet" };
  }
  return null;
}

/** The words of `needOf`, or null: nothing waits on you. */
export function needsYou(s: SessionInfo, state: SessionState | null = null, seen = 0): string | null {
  return needOf(s, state, seen)?.text ?? null;
}

/** Sessions that need a person first (most urgent first), then the most recently active. */
export function sortForList(sessions: SessionInfo[], needs: (s: SessionInfo) => Need | null = (s) => needOf(s, null, 0)?.need ?? null): SessionInfo[] {
  const recent = (x: SessionInfo) => x.last_activity ?? x.created_at;
  const rank = (x: SessionInfo) => {
    const n = needs(x);
    return n === null ? 99 : RANK[n];
  };
  return [...sessions].sort((x, y) => rank(x) - rank(y) || recent(y) - recent(x));
}

/** "(2) Mooring": the page title counting the sessions that need a person. */
export function titleFor(n: number, base = "Mooring", known = true): string {
  if (!known) return `(${n || ""}?) ${base}`;
  return n ? `(${n}) ${base}` : base;
}

/** The app badge (Badging API where the browser has it) counts them too. */
export function badge(n: number, nav: Navigator = navigator): void {
  const b = nav as Navigator & { setAppBadge?: (n: number) => Promise<void>; clearAppBadge?: () => Promise<void> };
  if (n) b.setAppBadge?.(n).catch(() => {});
  else b.clearAppBadge?.().catch(() => {});
}
