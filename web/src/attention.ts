// What waits on a person, counted wherever the page is: the page title's "(n)" and the app
// badge. The list counts from what it draws; every other view runs `watchNeeds`, which asks for
// the session list while the page is visible, so a phone with a session open still shows that
// another one waits on a decision.

import { api } from "./api";
import { badge, needOf, seenTurns, titleFor } from "./needs";
import type { SessionInfo } from "./protocol/SessionInfo";
import type { SessionState } from "./protocol/SessionState";

/** Live sessions whose derived state the list asks for (the most recently active). */
export const MAX_DETAILED = 50;
/** Requests for those states at once. */
const DETAIL_REQUESTS = 4;

/**
 * The derived state of each live session as of a head the list saw: asked for one by one (the
 * list does not carry it), again only when the session's head moved. A failed request leaves the
 * session's state unknown, and nothing is claimed from it.
 */
export class ListDetails {
  private known = new Map<string, { head: number; state: SessionState | null }>();

  constructor(private readonly fetchInfo: (id: string) => Promise<SessionInfo> = api.session) {}

  state(id: string): SessionState | null {
    return this.known.get(id)?.state ?? null;
  }

  /** Brings the states up to the heads in `sessions` (newest activity first); true if any changed. */
  async refresh(sessions: SessionInfo[]): Promise<boolean> {
    const live = sessions.filter((s) => s.status !== "ended").slice(0, MAX_DETAILED);
    const keep = new Set(live.map((s) => s.id));
    for (const id of [...this.known.keys()]) if (!keep.has(id)) this.known.delete(id);
    const todo = live.filter((s) => this.known.get(s.id)?.head !== s.head_seq);
    let changed = false;
    const worker = async () => {
      for (let s = todo.shift(); s; s = todo.shift()) {
        try {
          const info = await this.fetchInfo(s.id);
          this.known.set(s.id, { head: info.head_seq, state: info.state ?? null });
        } catch {
          this.known.delete(s.id);
        }
        changed = true;
      }
    };
    await Promise.all(Array.from({ length: DETAIL_REQUESTS }, worker));
    return changed;
  }
}

/** Sessions in `sessions` that wait on a person, as far as `details` knows their states. */
export function needsCount(sessions: SessionInfo[], details: ListDetails, seen: (id: string) => number = seenTurns): number {
  return sessions.filter((s) => needOf(s, details.state(s.id), seen(s.id)) !== null).length;
}

/** The title a view asked for, and the count last known: the page title is both. */
let titleBase = "Mooring";
let needCount = 0;
/** Whether the last recount reached the server (else the count is only the last one known). */
let needKnown = true;

/** Sets the page title (the count of sessions that need you is kept in front of it). */
export function setTitle(base: string, doc: Pick<Document, "title"> = document): void {
  titleBase = base;
  doc.title = titleFor(needCount, titleBase, needKnown);
}

/** Sets the count of sessions that need you: in the title and the app badge. */
export function setNeedCount(n: number, doc: Pick<Document, "title"> = document, nav: Navigator = navigator): void {
  needCount = n;
  needKnown = true;
  doc.title = titleFor(needCount, titleBase);
  badge(n, nav);
}

/**
 * The count could not be taken (the server is unreachable): the title says it is unknown,
 * "(2?)" after the last count known, "(?)" after none, rather than a count nobody can vouch for.
 */
export function setNeedCountUnknown(doc: Pick<Document, "title"> = document): void {
  needKnown = false;
  doc.title = titleFor(needCount, titleBase, false);
}

/** How often a view other than the list recounts. */
export const WATCH_MS = 15_000;

/** The parts of `document` the count uses. */
export interface PageDoc {
  title: string;
  visibilityState: DocumentVisibilityState;
  addEventListener(type: "visibilitychange", f: () => void): void;
  removeEventListener(type: "visibilitychange", f: () => void): void;
}

/** What `watchNeeds` reads and writes; the defaults are the page's own. */
export interface WatchDeps {
  every: number;
  list: () => Promise<SessionInfo[]>;
  details: ListDetails;
  doc: PageDoc;
  nav: Navigator;
  seen: (id: string) => number;
}

/**
 * Recounts every `every` ms while the page is visible (at once when it becomes visible again),
 * until the returned function is called. After a failed request the title says the count is
 * unknown (see `setNeedCountUnknown`) until a recount succeeds.
 */
export function watchNeeds(deps: Partial<WatchDeps> = {}): () => void {
  const { every = WATCH_MS, list = () => api.sessions(), details = new ListDetails(), doc = document, seen = seenTurns } = deps;
  let timer: ReturnType<typeof setTimeout> | null = null;
  let stopped = false;
  let running = false;
  const tick = async () => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (stopped || running) return;
    running = true;
    if (doc.visibilityState !== "hidden") {
      try {
        const sessions = await list();
        await details.refresh(sessions);
        if (!stopped) setNeedCount(needsCount(sessions, details, seen), doc, deps.nav ?? navigator);
      } catch {
        if (!stopped) setNeedCountUnknown(doc);
      }
    }
    running = false;
    if (!stopped) timer = setTimeout(tick, every);
  };
  const onVisible = () => {
    if (doc.visibilityState === "visible") void tick();
  };
  doc.addEventListener("visibilitychange", onVisible);
  void tick();
  return () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    doc.removeEventListener("visibilitychange", onVisible);
  };
}
