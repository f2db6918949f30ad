// Log compaction on the server: old entries of a few kinds (raw terminal output, streamed text
// deltas) are deleted from a session's log; every other entry stays. The server names what it
// removed with a mark (`Compacted`, on a reset or an entries page): every entry of `kinds` with a
// seq up to `through` is gone. Compaction works oldest first, so a session's mark only moves up
// (`SessionRetention.compacted_through` says the same of the whole log). Seqs the page holds are
// then not contiguous: a gap is explained when the mark reaches past it, and only then.
//
// This module holds that rule, the words for it, and where in a walk over entries a notice
// belongs (the transcript and the terminal both say where output is missing).

import type { Compacted } from "./protocol/Compacted";
import type { Entry } from "./protocol/Entry";

/**
 * Whether nothing the page must have lies strictly between seqs `a` and `b` (a < b): they are
 * neighbours, or compaction went past every seq between them.
 */
export function bridged(a: number, b: number, mark: Compacted | null): boolean {
  return b > a && (b === a + 1 || (mark !== null && b - 1 <= mark.through));
}

/** The further of two marks (a mark only moves up; the newer totals come with it). */
export function furthest(a: Compacted | null, b: Compacted | null): Compacted | null {
  if (!a) return b;
  if (!b) return a;
  return b.through >= a.through ? b : a;
}

const KIND_WORDS: Record<string, string> = {
  "agent.pty.output": "terminal output",
  "agent.text.delta": "streamed text",
};

/** Bytes as a person reads them: "512 B", "3.4 KiB", "12 MiB". */
export function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[u]}`;
}

/** "Terminal output and streamed text up to #812 were compacted on the server (1234 entries, 3.1 MiB)". */
export function compactedText(c: Compacted): string {
  const words = c.kinds.map((k) => KIND_WORDS[k] ?? k);
  const what = words.length > 1 ? `${words.slice(0, -1).join(", ")} and ${words[words.length - 1]}` : (words[0] ?? "entries");
  const n = `${c.entries} ${c.entries === 1 ? "entry" : "entries"}`;
  return `${what[0].toUpperCase()}${what.slice(1)} up to #${c.through} were compacted on the server (${n}, ${bytesText(c.bytes)})`;
}

/**
 * Where compaction notices belong in a walk over entries in seq order: before an entry that
 * follows a gap the mark explains, and at the end when the mark reaches past the last entry
 * (what came after it may be gone). One notice per stretch with gaps: the next gap earns its own
 * only after an entry of a compacted kind was held in between (a stretch read before compaction
 * ran, which lacks nothing).
 */
export class GapNotes {
  /** Since the last notice, the walk held an entry of a compacted kind. */
  private fresh = true;

  /**
   * `at`: the seq the walk starts after (0 at the log's start, so entries missing below the
   * first one are said); null: unknown, nothing is said below the first entry.
   */
  constructor(
    private at: number | null,
    public mark: Compacted | null,
  ) {}

  /** The last seq walked (null: none, and no start given). */
  get reached(): number | null {
    return this.at;
  }

  /** Steps onto `e`; when a notice belongs right before it, the seq its gap follows, else null. */
  step(e: Entry): number | null {
    const prev = this.at;
    const gap = prev !== null && e.seq > prev + 1 && bridged(prev, e.seq, this.mark);
    if (prev === null || e.seq > prev) this.at = e.seq;
    const say = gap && this.fresh;
    if (say) this.fresh = false;
    if (this.mark?.kinds.includes(e.kind)) this.fresh = true;
    return say ? prev : null;
  }

  /** Takes a mark the server named (the furthest wins); true when it moved. */
  note(c: Compacted): boolean {
    const was = this.mark;
    const next = was && was.through > c.through ? was : c;
    this.mark = next;
    return !was || next.through !== was.through || next.entries !== was.entries || next.bytes !== was.bytes;
  }

  /** True when a notice belongs at the end: the mark reaches past the last seq walked. */
  tail(): boolean {
    const say = this.at !== null && this.mark !== null && this.at < this.mark.through && this.fresh;
    if (say) this.fresh = false;
    return say;
  }
}
