// The entries of one session the page holds: always a contiguous run of seqs [lo, hi], so what
// is shown can have no gap and no duplicate. Live entries extend it at the top end, paging at the
// bottom end; anything else is refused.

import type { Entry } from "./protocol/Entry";

/** A live entry came with a seq beyond hi + 1: the stream must restart from hi. */
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
  private anchor = 0;

  constructor(anchor = 0) {
    this.reset(anchor);
  }

  /** Empties the window; the next live entry must be `anchor + 1`. */
  reset(anchor: number): void {
    this.entries = [];
    this.anchor = anchor;
    this.hasOlder = anchor > 0;
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

  /** Appends live entries; drops those already held, throws on a gap. Returns what was added. */
  append(batch: Entry[]): Entry[] {
    const added: Entry[] = [];
    for (const e of batch) {
      const hi = this.hi;
      if (e.seq <= hi) continue;
      if (e.seq !== hi + 1) {
        if (added.length) return added;
        throw new GapError(hi + 1, e.seq);
      }
      this.entries.push(e);
      added.push(e);
    }
    return added;
  }

  /** Prepends an older page (ascending); keeps only the part that ends right below `lo`. */
  prepend(page: Entry[], hasMore: boolean): Entry[] {
    const lo = this.lo;
    const older = page.filter((e) => e.seq < lo);
    // Must end exactly at lo - 1 and be contiguous, else it is not the page we asked for.
    for (let i = 0; i < older.length; i++) {
      if (older[i].seq !== lo - older.length + i) return [];
    }
    this.entries = older.concat(this.entries);
    this.hasOlder = hasMore && this.lo > 1;
    if (this.lo <= 1) this.hasOlder = false;
    return older;
  }
}
