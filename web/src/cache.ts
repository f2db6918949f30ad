// The last window of every session this device opened, kept in IndexedDB: its newest entries
// (a contiguous run, at most WINDOW_ENTRIES of them), the session's info and derived state, and
// when they were stored. A reload — offline, or with the server down — draws the transcript, the
// terminal and the composer from it at once, and the stream resumes after its newest entry
// instead of starting over. What is stored is only ever what the server sent: a window that is
// not contiguous is cut to its newest contiguous run; access removed deletes it.

import type { Entry } from "./protocol/Entry";
import type { SessionInfo } from "./protocol/SessionInfo";
import type { SessionState } from "./protocol/SessionState";

/** Entries kept per session (the newest). */
export const WINDOW_ENTRIES = 10_000;
/** Sessions kept; the least recently stored one goes first. */
export const WINDOW_SESSIONS = 20;
/** An entry larger than this (its JSON) ends the stored window below it: bytes stay bounded. */
export const ENTRY_MAX_BYTES = 256 * 1024;

export interface StoredMeta {
  session: string;
  info: SessionInfo | null;
  state: SessionState | null;
  /** When this device last heard from the server about the session (ms). */
  at: number;
}

export interface StoredWindow {
  meta: StoredMeta;
  /** Contiguous, ascending. */
  entries: Entry[];
}

/** The newest contiguous run of `entries` (ascending by seq), at most `max` long. */
export function contiguousTail(entries: Entry[], max = WINDOW_ENTRIES): Entry[] {
  const sorted = [...entries].sort((a, b) => a.seq - b.seq);
  let start = sorted.length - 1;
  if (start < 0) return [];
  while (start > 0 && sorted[start - 1].seq === sorted[start].seq - 1 && sorted.length - start < max) start--;
  return sorted.slice(start);
}

/** A stored row without its session key: the entry as the server sent it. */
function strip({ session: _s, ...e }: Entry & { session: string }): Entry {
  return e as Entry;
}

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

function done(tx: IDBTransaction): Promise<void> {
  return new Promise((resolve, reject) => {
    tx.oncomplete = () => resolve();
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}

export class WindowCache {
  private constructor(private readonly db: IDBDatabase) {}

  /** Opens the cache, or null where IndexedDB is unavailable (the page works without it). */
  static async open(name = "moor-window"): Promise<WindowCache | null> {
    if (typeof indexedDB === "undefined") return null;
    try {
      const db = await new Promise<IDBDatabase>((resolve, reject) => {
        const open = indexedDB.open(name, 1);
        open.onupgradeneeded = () => {
          const db = open.result;
          db.createObjectStore("meta", { keyPath: "session" });
          db.createObjectStore("entries", { keyPath: ["session", "seq"] });
        };
        open.onsuccess = () => resolve(open.result);
        open.onerror = () => reject(open.error);
        open.onblocked = () => reject(new Error("IndexedDB blocked"));
      });
      return new WindowCache(db);
    } catch {
      return null;
    }
  }

  private range(session: string, from = 0, to = Number.MAX_SAFE_INTEGER): IDBKeyRange {
    return IDBKeyRange.bound([session, from], [session, to]);
  }

  /** The stored window of `session`, or null. */
  async load(session: string): Promise<StoredWindow | null> {
    const tx = this.db.transaction(["meta", "entries"], "readonly");
    const [meta, rows] = await Promise.all([
      req(tx.objectStore("meta").get(session) as IDBRequest<StoredMeta | undefined>),
      req(tx.objectStore("entries").getAll(this.range(session)) as IDBRequest<(Entry & { session: string })[]>),
    ]);
    if (!meta) return null;
    const entries = contiguousTail(rows.map(strip));
    return { meta, entries };
  }

  /**
   * The newest `n` entries of the stored window of `session` and its meta, or null: what the
   * first screen needs, read without the rest of the window (one key step back from the end,
   * then one bounded range), so the time to draw does not grow with the window kept.
   */
  async loadTail(session: string, n: number): Promise<StoredWindow | null> {
    const tx = this.db.transaction(["meta", "entries"], "readonly");
    const entries = tx.objectStore("entries");
    const [meta, last] = await Promise.all([
      req(tx.objectStore("meta").get(session) as IDBRequest<StoredMeta | undefined>),
      req(entries.openKeyCursor(this.range(session), "prev")),
    ]);
    if (!meta) return null;
    if (!last) return { meta, entries: [] };
    const hi = (last.key as [string, number])[1];
    const rows = await req(entries.getAll(this.range(session, Math.max(0, hi - n + 1), hi)) as IDBRequest<(Entry & { session: string })[]>);
    return { meta, entries: contiguousTail(rows.map(strip), n) };
  }

  /**
   * The stored entries right below `lo`, at most `max`: the newest contiguous run of them if it
   * ends at `lo - 1`, else none (the part of the window a tail read left out).
   */
  async loadBefore(session: string, lo: number, max: number): Promise<Entry[]> {
    if (lo <= 1 || max <= 0) return [];
    const tx = this.db.transaction("entries", "readonly");
    const rows = await req(tx.objectStore("entries").getAll(this.range(session, Math.max(0, lo - max), lo - 1)) as IDBRequest<(Entry & { session: string })[]>);
    const run = contiguousTail(rows.map(strip), max);
    return run.length && run[run.length - 1].seq === lo - 1 ? run : [];
  }

  /** Stores entries the window gained (either end), and trims below the newest WINDOW_ENTRIES. */
  async add(session: string, entries: Entry[], hi: number): Promise<void> {
    const keep = entries.filter((e) => e.seq > hi - WINDOW_ENTRIES && JSON.stringify(e.payload).length <= ENTRY_MAX_BYTES);
    const tx = this.db.transaction("entries", "readwrite");
    const store = tx.objectStore("entries");
    for (const e of keep) store.put({ ...e, session });
    if (hi > WINDOW_ENTRIES) store.delete(this.range(session, 0, hi - WINDOW_ENTRIES));
    await done(tx);
  }

  /** Stores the session's info and state as of `at`; keeps at most WINDOW_SESSIONS sessions. */
  async saveMeta(meta: StoredMeta): Promise<void> {
    const tx = this.db.transaction(["meta", "entries"], "readwrite");
    const metas = tx.objectStore("meta");
    metas.put(meta);
    const all = await req(metas.getAll() as IDBRequest<StoredMeta[]>);
    const old = all.sort((a, b) => b.at - a.at).slice(WINDOW_SESSIONS);
    for (const m of old) {
      metas.delete(m.session);
      tx.objectStore("entries").delete(this.range(m.session));
    }
    await done(tx);
  }

  /** Forgets the session's stored entries (the window was re-anchored), keeping its meta. */
  async clearEntries(session: string): Promise<void> {
    const tx = this.db.transaction("entries", "readwrite");
    tx.objectStore("entries").delete(this.range(session));
    await done(tx);
  }

  /** Forgets everything about the session (access removed). */
  async forget(session: string): Promise<void> {
    const tx = this.db.transaction(["meta", "entries"], "readwrite");
    tx.objectStore("meta").delete(session);
    tx.objectStore("entries").delete(this.range(session));
    await done(tx);
  }
}
