// The entries of one session the page holds: an ascending run of seqs [lo, hi] with no gap the
// server has not explained, so what is shown can miss nothing that is stored and hold no
// duplicate. The only gaps allowed are those log compaction made (compaction.ts): seqs at or
// below the furthest compaction mark the server named. Live entries extend the run at the top
// end, paging at the bottom end; anything else is refused.

import { bridged, furthest } from "./compaction";
import type { Compacted } from "./protocol/Compacted";
import type { EntriesPage } from "./protocol/EntriesPage";
import type { Entry } from "./protocol/Entry";

/** A live entry came with a gap below it that nothing explains: the stream must restart from hi. */
export class GapError extends Error {
  constructor(
    readonly expected: number,
    readonly got: number,
  ) {
    super(`expected seq ${expected}, got ${got}`);
  }
}

export class EntryWindow {
  entries: Entry[] = [];
  /** Older entries exist below `lo`. */
  hasOlder = false;
  /**
   * The furthest compaction mark the server named for this session's log (null: none). Kept
   * across `reset` (it is the log's, not the window's); cleared only for a log that is not the
   * one it came from.
   */
  compacted: Compacted | null = null;
  private anchor = 0;

  constructor(anchor = 0) {
    this.reset(anchor);
  }

  /** Empties the window; the next live entry must be `anchor + 1` (or past it across a compacted gap). */
  reset(anchor: number): void {
    this.entries = [];
    this.anchor = anchor;
    this.hasOlder = anchor > 0;
  }

  /** Takes a compaction mark the server named; the furthest one wins. */
  noteCompacted(c: Compacted): void {
    this.compacted = furthest(this.compacted, c);
  }

  /** Seq of the newest entry held (the live cursor). */
  get hi(): number {
    const n = this.entries.length;
    return n ? this.entries[n - 1].seq : this.anchor;
  }

  /** Seq of the oldest entry held (hi + 1 when empty). */
  get lo(): number {
    return this.entries.length ? this.entries[0].seq : this.anchor + 1;
  }

  /**
   * The held entries begin the log: nothing is stored below `lo` (none older, and every seq
   * below it is 0 or was compacted away).
   */
  get fromLogStart(): boolean {
    return this.lo <= 1 || (!this.hasOlder && this.lo - 1 <= (this.compacted?.through ?? 0));
  }

  /** The seq a walk over the held entries starts after: 0 at the log's start, else the one below `lo`. */
  get below(): number {
    return this.fromLogStart ? 0 : this.lo - 1;
  }

  /** Appends live entries; drops those already held, throws on an unexplained gap. Returns what was added. */
  append(batch: Entry[]): Entry[] {
    const added: Entry[] = [];
    for (const e of batch) {
      const hi = this.hi;
      if (e.seq <= hi) continue;
      if (!bridged(hi, e.seq, this.compacted)) {
        if (added.length) return added;
        throw new GapError(hi + 1, e.seq);
      }
      this.entries.push(e);
      added.push(e);
    }
    return added;
  }

  /**
   * Prepends an older page (ascending); keeps only the part below `lo`, and only if it reaches
   * up to `lo` and holds no gap compaction does not explain. Returns what was added.
   */
  prepend(page: Entry[], hasMore: boolean): Entry[] {
    const lo = this.lo;
    const older = page.filter((e) => e.seq < lo);
    // Each entry must be followed by the next one (the last one by lo), else it is not the page
    // we asked for.
    for (let i = 0; i < older.length; i++) {
      const next = i + 1 < older.length ? older[i + 1].seq : lo;
      if (!bridged(older[i].seq, next, this.compacted)) return [];
    }
    this.entries = older.concat(this.entries);
    this.hasOlder = hasMore && this.lo > 1;
    if (this.lo <= 1) this.hasOlder = false;
    return older;
  }
}

/** Where older entries come from (the server's entries API). */
export interface OlderSource {
  /** A page of the entries below seq `before` (ascending). */
  before(before: number): Promise<EntriesPage>;
  /** How far compaction went in the log, if it ran (a page read forward from 0 says). */
  mark(): Promise<Compacted | null>;
}

/**
 * Reads the page below the window's `lo` into it. A page read backwards does not say what
 * compaction removed: one refused for a gap is taken again once the server said how far
 * compaction went (it may have gone further than the window knows). Null: the window moved
 * meanwhile. `mark`: the mark learned on the way, if one was asked for.
 */
export async function loadOlderPage(win: EntryWindow, src: OlderSource): Promise<{ added: Entry[]; mark: Compacted | null } | null> {
  const before = win.lo;
  const page = await src.before(before);
  if (win.lo !== before) return null;
  const added = win.prepend(page.entries, page.has_more);
  if (added.length || !page.entries.some((e) => e.seq < before)) return { added, mark: null };
  const mark = await src.mark();
  if (win.lo !== before) return null;
  if (!mark) return { added, mark };
  win.noteCompacted(mark);
  return { added: win.prepend(page.entries, page.has_more), mark };
}
