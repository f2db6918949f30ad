// Restoring a checkpoint into a new branch on the machine that runs the session (`moor host`),
// and optionally into a new worktree of that branch, which the machine places itself: the
// machine does it in the session's project and reports the branch (and the worktree's path) in
// its own log; the work tree, its index and the branch checked out there are not touched.

import { api, ApiError } from "../api";
import { h } from "../dom";
import type { MachineInfo } from "../protocol/MachineInfo";

/** The machine running session `name` that the caller may act on, if any. */
export async function machineOf(name: string | null | undefined): Promise<MachineInfo | null> {
  if (!name) return null;
  try {
    for (const m of await api.machines()) {
      const full = await api.machine(m.id);
      if (full.sessions.some((s) => s.name === name)) return full;
    }
    return null;
  } catch {
    return null;
  }
}

/**
 * Reads the machine's log forward from the action at `seq`, page by page, each entry once
 * across calls; a call answers what the log says of the action so far (null: no answer yet).
 */
export function outcomeReader(logSession: string, seq: number): () => Promise<{ ok: boolean; text: string } | null> {
  let after = seq;
  return async () => {
    for (;;) {
      const page = await api.entriesAfter(logSession, after, 200);
      for (const e of page.entries) {
        after = e.seq;
        const p = e.payload as Record<string, unknown>;
        if (e.kind === "host.checkpoint.restored" && p.input_seq === seq) {
          const where = typeof p.worktree === "string" ? ` It is checked out in the worktree ${p.worktree}.` : "";
          return { ok: true, text: `Branch ${p.branch} now holds this checkpoint (commit ${String(p.commit).slice(0, 12)}) in project ${p.project}.${where}` };
        }
        if (e.kind === "input.failed" && p.input_seq === seq) return { ok: false, text: `Not restored: ${p.reason}` };
      }
      if (!page.has_more || !page.entries.length) return null;
    }
  };
}

/**
 * A branch field, a "new worktree" box and a Restore button for checkpoint `checkpoint` of
 * session `session`. The page never sends a path: the machine chooses the worktree's.
 */
export function restoreControl(machine: MachineInfo, session: string, checkpoint: string, wait = 1000): HTMLElement {
  const input = h("input.restore-branch", { type: "text", value: `moor/restore-${checkpoint}`, "aria-label": "New branch", autocapitalize: "off", spellcheck: false }) as HTMLInputElement;
  const worktree = h("input.restore-worktree", { type: "checkbox" }) as HTMLInputElement;
  const status = h("p.restore-status.muted", { "aria-live": "polite" });
  const key = crypto.randomUUID();
  const button = h(
    "button.restore-go",
    {
      type: "button",
      onclick: async () => {
        button.setAttribute("disabled", "");
        status.textContent = `Asking ${machine.name}…`;
        try {
          const branch = input.value.trim();
          const receipt = await api.restoreOnMachine(machine.id, session, {
            checkpoint,
            branch,
            worktree: worktree.checked || undefined,
            idempotency_key: `${key}:${branch}:${worktree.checked ? "worktree" : "branch"}`,
          });
          status.textContent = receipt.queued ? `${machine.name} is offline: it restores when it is back.` : `Asked ${machine.name}; waiting for its answer…`;
          const outcome = outcomeReader(machine.log_session, receipt.seq);
          for (let i = 0; i < 120; i++) {
            const out = await outcome();
            if (out) {
              status.textContent = out.text;
              status.className = out.ok ? "restore-status ok" : "restore-status bad";
              if (!out.ok) button.removeAttribute("disabled");
              return;
            }
            await new Promise((r) => setTimeout(r, wait));
          }
          status.textContent = `No answer from ${machine.name} yet; see the machine's page.`;
        } catch (e) {
          status.textContent = e instanceof ApiError ? `Not restored: ${e.message}` : `Not restored: ${(e as Error).message}`;
          status.className = "restore-status bad";
          button.removeAttribute("disabled");
        }
      },
    },
    "Restore into a new branch",
  );
  const box = h("label.restore-in-worktree", { title: "Also check the branch out in a new worktree on the machine" }, worktree, " and a new worktree");
  return h("div.restore", null, input, box, button, status);
}
