// PTY sessions: the agent's terminal in xterm.js, fed the raw bytes of `agent.pty.output`
// entries in log order, sized like the agent's terminal (`agent.pty.resize`). Keys typed here go
// out as `input.keys`. The helper keys (Esc, Tab, Ctrl as a latch, arrows, Ctrl-C, paste) never
// take the focus, so the phone's keyboard stays up and typing goes on into the terminal. A
// terminal wider than the phone pans sideways and zooms here only; resizing the agent's
// terminal — everyone's, the desk's too — is a separate, labelled action that asks twice.
// Where log compaction removed output, a dim line says so (what follows it was drawn on a screen
// this terminal never saw).

import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { GapNotes } from "../compaction";
import { h } from "../dom";
import { typed, type InputKind, type PayloadOf } from "../entries";
import type { Compacted } from "../protocol/Compacted";
import type { Entry } from "../protocol/Entry";

type Send = <K extends InputKind>(kind: K, payload: PayloadOf<K>) => void;

function b64(data: string): Uint8Array {
  const bin = atob(data);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * Written where compaction removed output: CAN ends any escape sequence the output before was
 * cut in, then default attributes, a dim line of its own, and default attributes again.
 */
export const COMPACTED_LINE = "\u0018\u001b[0m\r\n\u001b[2m── earlier output was compacted on the server ──\u001b[0m\r\n";

/** Keystrokes typed within this many ms go out as one input. */
const KEY_BATCH_MS = 25;
/** A second tap on "Resize" within this long resizes the agent's terminal. */
const CONFIRM_MS = 5000;
const FONT_MIN = 7;
const FONT_MAX = 20;

/** The control character for `c` with Ctrl held (Ctrl-A = 0x01 … Ctrl-Z = 0x1a), or `c`. */
export function withCtrl(c: string): string {
  if (c.length !== 1) return c;
  const code = c.toUpperCase().charCodeAt(0);
  if (code >= 64 && code <= 95) return String.fromCharCode(code - 64);
  if (c === " ") return "\u0000";
  return c;
}

/**
 * A button that acts on pointerdown's click but never takes the focus: tabindex -1 and the
 * pointerdown's default (focusing) prevented, so the terminal keeps the keyboard, and Space or
 * Enter typed next go to the terminal, not to this button again.
 */
function helperKey(label: string, title: string, act: () => void, attrs: Record<string, string> = {}): HTMLButtonElement {
  const b = h("button.key", { type: "button", tabindex: "-1", title, "aria-label": title, ...attrs }, label) as HTMLButtonElement;
  b.addEventListener("pointerdown", (e) => e.preventDefault());
  b.addEventListener("mousedown", (e) => e.preventDefault());
  b.addEventListener("click", (e) => {
    e.preventDefault();
    act();
  });
  return b;
}

export class Terminal {
  private xterm: XTerm;
  private fit = new FitAddon();
  private keys = "";
  private keyTimer: ReturnType<typeof setTimeout> | null = null;
  /** Ctrl is latched: the next key typed goes out with Ctrl. */
  private ctrl = false;
  private ctrlBtn: HTMLButtonElement | null = null;
  private resizeBtn: HTMLButtonElement | null = null;
  private confirmUntil = 0;
  private readonly screen: HTMLElement;
  /** Where output is missing (compaction) in what was written. */
  private gaps = new GapNotes(null, null);

  constructor(box: HTMLElement, private readonly send: Send | null) {
    this.xterm = new XTerm({
      convertEol: false,
      fontSize: 13,
      scrollback: 5000,
      disableStdin: !send,
      theme: matchMedia("(prefers-color-scheme: dark)").matches ? undefined : { background: "#1e1e1e" },
    });
    this.xterm.loadAddon(this.fit);
    const screen = h("div.term-screen", { id: "term-screen" });
    this.screen = screen;
    const key = (label: string, title: string, text: string) => helperKey(label, title, () => this.type(text), { "data-key": label });
    const keys = send
      ? [
          key("Esc", "Escape", "\u001b"),
          key("Tab", "Tab", "\t"),
          (this.ctrlBtn = helperKey("Ctrl", "Ctrl: applies to the next key", () => this.latch(!this.ctrl), { "data-key": "Ctrl", "aria-pressed": "false" })),
          key("←", "Left", "\u001b[D"),
          key("↑", "Up", "\u001b[A"),
          key("↓", "Down", "\u001b[B"),
          key("→", "Right", "\u001b[C"),
          key("^C", "Ctrl-C (interrupt)", "\u0003"),
          helperKey("Paste", "Paste from the clipboard", () => void this.paste(), { "data-key": "Paste" }),
        ]
      : [];
    const view = [
      helperKey("A−", "Smaller text (this phone only)", () => this.zoom(-1), { id: "term-zoom-out" }),
      helperKey("A+", "Larger text (this phone only)", () => this.zoom(1), { id: "term-zoom-in" }),
    ];
    if (send) {
      this.resizeBtn = helperKey("Resize for everyone…", "Resize the agent's terminal to this screen (everyone's view changes)", () => this.fitRemote(), { id: "term-resize" });
      view.push(this.resizeBtn);
    }
    const tools = h("div.term-tools", { id: "term-keys" }, ...keys);
    const viewTools = h("div.term-tools.term-view", null, ...view);
    box.replaceChildren(tools, screen, viewTools);
    this.xterm.open(screen);
    if (send) this.xterm.onData((d) => this.type(d));
  }

  /** Queues typed text (helper keys and the keyboard alike), applying a latched Ctrl. */
  private type(d: string): void {
    if (this.ctrl && d.length === 1) {
      d = withCtrl(d);
      this.latch(false);
    }
    this.keys += d;
    if (!this.keyTimer) this.keyTimer = setTimeout(() => this.flushKeys(), KEY_BATCH_MS);
  }

  private latch(on: boolean): void {
    this.ctrl = on;
    this.ctrlBtn?.classList.toggle("on", on);
    this.ctrlBtn?.setAttribute("aria-pressed", String(on));
  }

  private async paste(): Promise<void> {
    let text = "";
    try {
      text = (await navigator.clipboard?.readText()) ?? "";
    } catch {
      text = "";
    }
    if (text) this.xterm.paste(text);
  }

  /** Local zoom: the agent's terminal keeps its size; this phone draws it smaller or larger. */
  private zoom(step: number): void {
    const size = Math.min(FONT_MAX, Math.max(FONT_MIN, (this.xterm.options.fontSize ?? 13) + step));
    this.xterm.options.fontSize = size;
  }

  private flushKeys(): void {
    this.keyTimer = null;
    if (this.keys && this.send) this.send("input.keys", { text: this.keys });
    this.keys = "";
  }

  /** First tap: says what it will do; a second within CONFIRM_MS resizes the agent's terminal. */
  private fitRemote(): void {
    const dims = this.fit.proposeDimensions();
    const btn = this.resizeBtn;
    if (!dims || !this.send || !btn) return;
    if (Date.now() > this.confirmUntil) {
      this.confirmUntil = Date.now() + CONFIRM_MS;
      btn.textContent = `Tap again: resize everyone's terminal to ${dims.cols}×${dims.rows}`;
      btn.classList.add("confirm");
      setTimeout(() => {
        if (Date.now() >= this.confirmUntil) this.unconfirm();
      }, CONFIRM_MS);
      return;
    }
    this.unconfirm();
    this.send("input.resize", { cols: dims.cols, rows: dims.rows });
  }

  private unconfirm(): void {
    this.confirmUntil = 0;
    if (!this.resizeBtn) return;
    this.resizeBtn.textContent = "Resize for everyone…";
    this.resizeBtn.classList.remove("confirm");
  }

  /** Where the terminal can pan (for tests): its width and the visible width. */
  pan(): { scrollWidth: number; clientWidth: number } {
    return { scrollWidth: this.screen.scrollWidth, clientWidth: this.screen.clientWidth };
  }

  /** Writes the bytes of new entries. */
  write(entries: Entry[]): void {
    for (const e of entries) {
      if (this.gaps.step(e) !== null) this.xterm.write(COMPACTED_LINE);
      const b = typed(e);
      if (b?.kind === "agent.pty.output" && typeof b.payload.data === "string") this.xterm.write(b64(b.payload.data));
      else if (b?.kind === "agent.pty.resize" && b.payload.cols && b.payload.rows) this.xterm.resize(b.payload.cols, b.payload.rows);
    }
  }

  /**
   * Starts over from `entries` (after older entries were loaded or the window was re-anchored).
   * `after`: the seq they follow (0 at the log's start; null: unknown); `mark`: the compaction
   * mark known.
   */
  reload(entries: Entry[], after: number | null = null, mark: Compacted | null = null): void {
    this.xterm.reset();
    this.gaps = new GapNotes(after, mark);
    this.write(entries);
    if (this.gaps.tail()) this.xterm.write(COMPACTED_LINE);
  }

  /** The server named a compaction mark at the cursor: output after the last written may be gone. */
  compact(mark: Compacted): void {
    if (this.gaps.note(mark) && this.gaps.tail()) this.xterm.write(COMPACTED_LINE);
  }

  dispose(): void {
    this.xterm.dispose();
  }
}
