// A virtualised list of variable-height rows: only the rows in (and near) the viewport exist in
// the DOM, absolutely positioned from a prefix sum of measured (or estimated) heights. It keeps
// the view pinned to the bottom while new rows arrive if it was there, and keeps what the reader
// looks at in place when rows are added above (older pages) or change height.

export interface RowSource {
  count(): number;
  key(i: number): string;
  version(i: number): number;
  estimate(i: number): number;
  render(i: number): HTMLElement;
}

const OVERSCAN_PX = 600;
/** How long after the reader's last wheel, touch, key or pointer a scroll counts as theirs. */
const READER_MS = 1000;
/** Keys that scroll the list when no text field has the focus. */
const SCROLL_KEYS = new Set(["ArrowUp", "ArrowDown", "PageUp", "PageDown", "Home", "End", " "]);

function editable(t: EventTarget | null): boolean {
  return t instanceof HTMLElement && (t.isContentEditable || t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
}

export class VirtualList {
  readonly inner: HTMLElement;
  private heights: number[] = [];
  private prefix: Float64Array = new Float64Array(1);
  private dirtyFrom = 0;
  private rows = new Map<string, { el: HTMLElement; v: number; i: number }>();
  private frame = 0;
  /** Follow new rows (the reader is at the bottom). */
  stick = true;
  /** When the reader last wheeled, touched, pressed a key or a pointer. */
  private readerAt = -Infinity;
  /** Ends the listeners outside the scroller (see `destroy`). */
  private readonly life = new AbortController();
  onNearTop: (() => void) | null = null;
  onRendered: (() => void) | null = null;

  constructor(
    readonly scroller: HTMLElement,
    private readonly src: RowSource,
  ) {
    this.inner = document.createElement("div");
    this.inner.className = "vl-inner";
    scroller.append(this.inner);
    scroller.addEventListener(
      "scroll",
      () => {
        const gap = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight;
        // Only the reader leaves the bottom. The event of the list's own move there, or of the
        // browser clamping the position as rows are measured again, can arrive after the
        // scroller shrank (a decision bar came up): a gap the reader never made.
        if (gap < 48) this.stick = true;
        else if (performance.now() - this.readerAt < READER_MS) this.stick = false;
        if (scroller.scrollTop < 400) this.onNearTop?.();
        this.schedule();
      },
      { passive: true },
    );
    const reader = () => {
      this.readerAt = performance.now();
    };
    scroller.addEventListener("wheel", reader, { passive: true });
    scroller.addEventListener("touchmove", reader, { passive: true });
    // On the scroller itself, not a row: its scrollbar. A tap on a row's button scrolls nothing.
    scroller.addEventListener("pointerdown", (e) => e.target === scroller && reader(), { passive: true });
    scroller.ownerDocument.addEventListener("keydown", (e) => SCROLL_KEYS.has(e.key) && !editable(e.target) && reader(), {
      passive: true,
      signal: this.life.signal,
    });
    new ResizeObserver(() => this.schedule()).observe(scroller);
  }

  /** The view is gone: stops listening to the document. */
  destroy(): void {
    this.life.abort();
    cancelAnimationFrame(this.frame);
    this.frame = 0;
  }

  /** Rows were appended at the end. */
  appended(): void {
    const n = this.src.count();
    for (let i = this.heights.length; i < n; i++) this.heights.push(this.src.estimate(i));
    this.schedule();
  }

  /** `n` rows were inserted at the top; keeps the reader's position. */
  prepended(n: number): void {
    const added: number[] = [];
    for (let i = 0; i < n; i++) added.push(this.src.estimate(i));
    this.heights = added.concat(this.heights);
    this.dirtyFrom = 0;
    const extra = added.reduce((a, b) => a + b, 0);
    // Indexes moved: forget the rendered rows' positions (their keys stay valid).
    // The rows drawn move down with the scroll position, in the same task: the DOM never holds
    // rows placed for the old offsets under the new scroll position, not even until the frame.
    for (const r of this.rows.values()) {
      r.i += n;
      r.el.style.transform = `translateY(${this.offset(r.i)}px)`;
    }
    this.layout();
    // Shifted in the same task, stuck to the bottom or not: a scroll event already queued (from
    // the last render's move to the bottom) then still finds the reader where they were, and
    // does not take rows put above for a scroll away from the newest.
    this.scroller.scrollTop += extra;
    this.schedule();
  }

  /** Everything changed (rebuilt model). */
  reset(): void {
    this.heights = [];
    this.dirtyFrom = 0;
    for (const r of this.rows.values()) r.el.remove();
    this.rows.clear();
    this.appended();
  }

  /** Row contents changed; redraw those on screen. */
  changed(): void {
    this.schedule();
  }

  /** A render is scheduled: the rows on screen do not show the latest state yet. */
  get pending(): boolean {
    return this.frame !== 0;
  }

  scrollToBottom(): void {
    this.stick = true;
    this.schedule();
  }

  schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.render();
    });
  }

  /** Top offset of row `i`. */
  offset(i: number): number {
    this.fixPrefix();
    return this.prefix[i];
  }

  private fixPrefix(): void {
    const n = this.heights.length;
    if (this.prefix.length < n + 1) {
      const p = new Float64Array(Math.max(n + 1, this.prefix.length * 2));
      p.set(this.prefix.subarray(0, Math.min(this.prefix.length, this.dirtyFrom + 1)));
      this.prefix = p;
    }
    for (let i = this.dirtyFrom; i < n; i++) this.prefix[i + 1] = this.prefix[i] + this.heights[i];
    this.dirtyFrom = n;
  }

  private total(): number {
    return this.offset(this.heights.length);
  }

  private layout(): void {
    this.inner.style.height = `${this.total()}px`;
  }

  /** First row whose bottom is below `y`. */
  private indexAt(y: number): number {
    this.fixPrefix();
    let lo = 0;
    let hi = this.heights.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.prefix[mid + 1] <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private render(): void {
    if (this.heights.length < this.src.count()) this.appended();
    const sc = this.scroller;
    for (let pass = 0; pass < 4; pass++) {
      this.layout();
      if (this.stick) sc.scrollTop = sc.scrollHeight;
      const top = sc.scrollTop;
      const first = this.indexAt(Math.max(0, top - OVERSCAN_PX));
      const firstVisible = this.indexAt(top);
      const bottom = top + sc.clientHeight + OVERSCAN_PX;
      const keep = new Set<string>();
      const shown: { row: { el: HTMLElement; v: number; i: number } }[] = [];
      // Writes first (create, update, place), then one read of all heights: no layout thrash.
      for (let i = first; i < this.heights.length && this.offset(i) < bottom; i++) {
        const key = this.src.key(i);
        keep.add(key);
        let row = this.rows.get(key);
        const v = this.src.version(i);
        if (!row || row.v !== v) {
          const el = this.src.render(i);
          el.classList.add("vl-row");
          el.dataset.key = key;
          if (row) row.el.replaceWith(el);
          else this.inner.append(el);
          row = { el, v, i };
          this.rows.set(key, row);
        }
        row.i = i;
        row.el.style.transform = `translateY(${this.offset(i)}px)`;
        shown.push({ row });
      }
      for (const [key, row] of this.rows) {
        if (!keep.has(key)) {
          row.el.remove();
          this.rows.delete(key);
        }
      }
      let changed = false;
      let adjustAbove = 0;
      const measured = shown.map(({ row }) => row.el.offsetHeight);
      shown.forEach(({ row }, k) => {
        const h = measured[k];
        const i = row.i;
        if (h && Math.abs(h - this.heights[i]) > 0.5) {
          if (i < firstVisible) adjustAbove += h - this.heights[i];
          this.heights[i] = h;
          this.dirtyFrom = Math.min(this.dirtyFrom, i);
          changed = true;
        }
      });
      if (!changed) break;
      this.layout();
      if (adjustAbove && !this.stick) sc.scrollTop += adjustAbove;
    }
    this.onRendered?.();
  }
}
