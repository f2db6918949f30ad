// The last window of every session this device opened, kept in IndexedDB: its newest entries
// (a run with no unexplained gap, at most WINDOW_ENTRIES of them), the session's info, derived
// state and compaction mark, and when they were stored. A reload — offline, or with the server
// down — draws the transcript, the terminal and the composer from it at once, and the stream
// resumes after its newest entry instead of starting over. What is stored is only ever what the
// server sent: a window with a gap that the stored compaction mark does not explain (or that an
// entry too large to keep left) is cut to its newest run without one; access removed deletes it.

import { bridged } from "./compaction";
import type { Compacted } from "./protocol/Compacted";
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
  /**
   * The furthest compaction mark the server named for the session's log: the gaps it explains
   * are part of the stored window (absent in windows stored before compaction existed).
   */
  compacted?: Compacted | null;
}

export interface StoredWindow {
  meta: StoredMeta;
  /** Ascending; gaps only where `meta.compacted` explains them. */
  entries: Entry[];
}

/** Stands in the store for an entry too large to keep: no run of the window crosses it. */
export interface Cut {
  seq: number;
  cut: true;
}

const isCut = (r: Entry | Cut): r is Cut => "cut" in r;

/**
 * The newest run of `rows` (by seq) with no gap `mark` does not explain and no cut, at most
 * `max` long. A cut at the very top is left out (the stream fetches that entry again).
 */
export function contiguousTail(rows: (Entry | Cut)[], max = WINDOW_ENTRIES, mark: Compacted | null = null): Entry[] {
  const sorted = [...rows].sort((a, b) => a.seq - b.seq);
  let end = sorted.length;
  while (end > 0 && isCut(sorted[end - 1])) end--;
  let start = end - 1;
  if (start < 0) return [];
  while (start > 0 && !isCut(sorted[start - 1]) && bridged(sorted[start - 1].seq, sorted[start].seq, mark) && end - start < max) start--;
  return sorted.slice(start, end) as Entry[];
}

type Row = (Entry | Cut) & { session: string };

/** A stored row without its session key: the entry as the server sent it (or a cut). */
function strip({ session: _s, ...e }: Row): Entry | Cut {
  return e as Entry | Cut;
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
      req(tx.objectStore("entries").getAll(this.range(session)) as IDBRequest<Row[]>),
    ]);
    if (!meta) return null;
    const entries = contiguousTail(rows.map(strip), WINDOW_ENTRIES, meta.compacted ?? null);
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
    const rows = await req(entries.getAll(this.range(session, Math.max(0, hi - n + 1), hi)) as IDBRequest<Row[]>);
    return { meta, entries: contiguousTail(rows.map(strip), n, meta.compacted ?? null) };
  }

  /**
   * The stored entries right below `lo` (seqs from `lo - max`), at most `max`: their newest run
   * if it reaches up to `lo` (next to it, or across a gap `mark` explains), else none (the part
   * of the window a tail read left out).
   */
  async loadBefore(session: string, lo: number, max: number, mark: Compacted | null = null): Promise<Entry[]> {
    if (lo <= 1 || max <= 0) return [];
    const tx = this.db.transaction("entries", "readonly");
    const rows = (await req(tx.objectStore("entries").getAll(this.range(session, Math.max(0, lo - max), lo - 1)) as IDBRequest<Row[]>)).map(strip);
    const top = rows[rows.length - 1];
    if (!top || isCut(top) || !bridged(top.seq, lo, mark)) return [];
    return contiguousTail(rows, max, mark);
  }

  /**
   * Stores entries the window gained (either end), and trims below the newest WINDOW_ENTRIES.
   * An entry too large to keep is stored as a cut, so no stored run is taken across it.
   */
  async add(session: string, entries: Entry[], hi: number): Promise<void> {
    const keep = entries.filter((e) => e.seq > hi - WINDOW_ENTRIES);
    const tx = this.db.transaction("entries", "readwrite");
    const store = tx.objectStore("entries");
    for (const e of keep) store.put(JSON.stringify(e.payload).length <= ENTRY_MAX_BYTES ? { ...e, session } : { seq: e.seq, cut: true, session });
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
