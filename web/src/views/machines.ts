// Machines running `moor host`: `#/machines` lists them (online, or "unknown since" when their
// lease lapsed), `#/m/<id>` shows one machine's sessions (phase, "needs you" counts) with stop
// and resume (an ended one continues in a new, linked session), and the start sheet: the projects (branch, dirty) and agents the machine
// advertised, a first prompt, and whether to checkpoint the project first. The page sends
// names only, never a command or a path.

import { api, ApiError, explain } from "../api";
import { setTitle } from "../attention";
import { clock, h, randomId, themeButton } from "../dom";
import type { BridgeStatus } from "../protocol/BridgeStatus";
import type { MachineInfo } from "../protocol/MachineInfo";
import type { MachineSession } from "../protocol/MachineSession";

const REFRESH_MS = 5000;

/** A machine's link in words, true to what the server can prove (G9). */
export function linkText(link: BridgeStatus): { cls: string; text: string } {
  if (link.online) return { cls: "ok", text: "online" };
  if (link.since === null) return { cls: "muted", text: "unknown: not seen since moord started" };
  return { cls: "bad", text: `unknown since ${clock(link.since)}` };
}

/** A machine session's state in words. */
export function sessionText(s: MachineSession): { cls: string; text: string } {
  if (s.ended) return { cls: "muted", text: "ended" };
  if (!s.bridge) return { cls: "muted", text: "starting" };
  if (!s.bridge.online) return { cls: "bad", text: s.bridge.since ? `bridge lost ${clock(s.bridge.since)}` : "bridge lost" };
  return { cls: "ok", text: (s.phase ?? "idle").replace(/_/g, " ") };
}

/** How many of the machine's sessions wait on a person. */
export function needsYouCount(m: MachineInfo): number {
  return m.sessions.reduce((n, s) => n + (s.ended ? 0 : s.needs_you), 0);
}

function header(title: string, back: string | null): HTMLElement {
  return h(
    "header.top",
    null,
    h("div.row", null, back ? h("a.tb", { href: back, id: "back" }, "‹ Back") : null, h("h1.title", null, title), h("div.spacer"), themeButton()),
  );
}

/** `#/machines`. */
export function machinesView(root: HTMLElement): () => void {
  setTitle("Machines · Mooring");
  const body = h("div.list", { id: "machines" });
  const note = h("div.banner", { id: "machines-banner" });
  root.replaceChildren(header("Machines", "#/"), note, h("main.list-main", null, body));
  return poll(async () => {
    const machines = await api.machines();
    body.replaceChildren(
      ...machines.map((m) => {
        const st = linkText(m.link);
        return h(
          "a.session-card",
          { href: `#/m/${encodeURIComponent(m.id)}`, "data-machine": m.id },
          h("div.row", null, h("b.ell", null, m.name), h("div.spacer"), h(`span.pill.${st.cls}`, { "data-link": m.link.online ? "online" : "unknown" }, st.text)),
          h("div.muted.ell", null, `${m.os} · moor ${m.version} · ${m.projects.length} projects · ${m.agents.length} agents`),
        );
      }),
    );
    if (!machines.length) body.append(h("p.muted", { id: "no-machines" }, "No machines. On a machine: moor host install (see docs/host.md)."));
  }, note).stop;
}

/** `#/m/<id>`: one machine, its sessions, and the start sheet. */
export function machineView(root: HTMLElement, id: string): () => void {
  setTitle("Machine · Mooring");
  const title = h("h2", { id: "machine-name" });
  const link = h("span.pill", { id: "machine-link" });
  const sessions = h("div.list", { id: "machine-sessions" });
  const project = h("select", { id: "start-project", "aria-label": "Project" });
  const agent = h("select", { id: "start-agent", "aria-label": "Agent" });
  const prompt = h("textarea", { id: "start-prompt", rows: 3, placeholder: "First prompt (optional)" });
  const checkpoint = h("input", { type: "checkbox", id: "start-checkpoint" }) as HTMLInputElement;
  const result = h("div.muted", { id: "start-result" });
  const note = h("div.banner", { id: "machine-banner" });
  let key = randomId();
  const start = h(
    "button.tb",
    {
      type: "button",
      id: "start-session",
      onclick: async () => {
        try {
          const a = await api.startOnMachine(id, {
            project: project.value,
            agent: agent.value,
            prompt: prompt.value || undefined,
            checkpoint: checkpoint.checked || undefined,
            idempotency_key: key,
          });
          key = randomId();
          prompt.value = "";
          checkpoint.checked = false;
          result.textContent = `asked: ${a.session}${a.queued ? " (the machine gets it when it is back)" : ""}`;
          refresh();
        } catch (e) {
          result.textContent = explain(e);
        }
      },
    },
    "Start",
  );
  const sheet = h(
    "section.sheet",
    { id: "start-sheet" },
    h("h3", null, "Start a session"),
    h("label", null, "Project ", project),
    h("label", null, "Agent ", agent),
    prompt,
    h("label", { title: "Checkpoint the project's changes before the agent starts" }, checkpoint, " Checkpoint first"),
    start,
    result,
  );
  root.replaceChildren(header("Machine", "#/machines"), note, h("main.list-main", null, h("div.row", null, title, h("div.spacer"), link), sheet, sessions));
  const act = (s: MachineSession, what: "stop" | "resume") =>
    h(
      "button.tb",
      {
        type: "button",
        "data-action": what,
        onclick: async () => {
          try {
            const a = await api.machineAction(id, s.name, what, randomId());
            if (a.session !== s.name) result.textContent = `${s.name} continues in ${a.session}`;
            refresh();
          } catch (e) {
            note.className = "banner bad";
            note.textContent = explain(e);
          }
        },
      },
      what === "stop" ? "Stop" : "Resume",
    );
  let filled = false;
  const { refresh, stop } = poll(async () => {
    const m = await api.machine(id);
    const needs = needsYouCount(m);
    title.textContent = needs ? `${m.name} · needs you (${needs})` : m.name;
    const st = linkText(m.link);
    link.className = `pill ${st.cls}`;
    link.textContent = st.text;
    if (!filled) {
      filled = true;
      project.replaceChildren(
        ...m.projects.map((p) =>
          h("option", { value: p.name }, `${p.name}${p.branch ? ` · ${p.branch}` : ""}${p.dirty ? " · changes" : ""}`),
        ),
      );
      agent.replaceChildren(...m.agents.map((a) => h("option", { value: a.name }, `${a.name} (${a.mode})`)));
    }
    sessions.replaceChildren(
      ...m.sessions.map((s) => {
        const t = sessionText(s);
        const running = !s.ended && s.bridge?.online;
        return h(
          "div.session-card",
          { "data-machine-session": s.name },
          h(
            "div.row",
            null,
            s.id ? h("a.ell", { href: `#/s/${encodeURIComponent(s.id)}` }, s.name) : h("b.ell", null, s.name),
            h("div.spacer"),
            h(`span.pill.${t.cls}`, { "data-phase": s.phase ?? "" }, t.text),
          ),
          h("div.muted", null, `${s.project} · ${s.agent}`, s.needs_you ? h("span.badge", { "data-needs-you": s.needs_you }, ` needs you (${s.needs_you})`) : null),
          h("div.row", null, running ? act(s, "stop") : act(s, "resume")),
        );
      }),
    );
  }, note);
  return stop;
}

/** Runs `load` now and every few seconds until stopped; errors go to `note`. */
function poll(load: () => Promise<void>, note: HTMLElement): { refresh: () => void; stop: () => void } {
  let timer: ReturnType<typeof setTimeout> | null = null;
  let stopped = false;
  const run = async () => {
    if (timer) clearTimeout(timer);
    try {
      await load();
      note.className = "banner";
      note.textContent = "";
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return;
      note.className = "banner bad";
      note.textContent = `${explain(e)}; retrying.`;
    }
    if (!stopped) timer = setTimeout(run, REFRESH_MS);
  };
  void run();
  return {
    refresh: () => void run(),
    stop: () => {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
