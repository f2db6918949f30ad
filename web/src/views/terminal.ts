// PTY sessions: the agent's terminal in xterm.js, fed the raw bytes of `agent.pty.output`
// entries in log order, sized like the agent's terminal (`agent.pty.resize`). Keys typed here go
// out as `input.keys`; "Fit" asks the agent's terminal to take this screen's size.

import { FitAddon } from "@xterm/addon-fit";
import { Terminal as XTerm } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { h } from "../dom";
import { typed, type InputKind, type PayloadOf } from "../entries";
import type { Entry } from "../protocol/Entry";

type Send = <K extends InputKind>(kind: K, payload: PayloadOf<K>) => void;

function b64(data: string): Uint8Array {
  const bin = atob(data);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Keystrokes typed within this many ms go out as one input. */
const KEY_BATCH_MS = 25;

export class Terminal {
  private xterm: XTerm;
  private fit = new FitAddon();
  private keys = "";
  private keyTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(box: HTMLElement, private readonly send: Send | null) {
    this.xterm = new XTerm({
      convertEol: false,
      fontSize: 13,
      scrollback: 5000,
      disableStdin: !send,
      theme: matchMedia("(prefers-color-scheme: dark)").matches ? undefined : { background: "#1e1e1e" },
    });
    this.xterm.loadAddon(this.fit);
    const screen = h("div.term-screen");
    const tools = h(
      "div.term-tools",
      null,
      send ? h("button", { type: "button", onclick: () => this.fitRemote() }, "Fit to this screen") : null,
      send ? h("button", { type: "button", onclick: () => send("input.keys", { text: "\u0003" }) }, "Ctrl-C") : null,
      send ? h("button", { type: "button", onclick: () => send("input.keys", { text: "\u001b" }) }, "Esc") : null,
      send ? h("button", { type: "button", onclick: () => send("input.keys", { text: "\t" }) }, "Tab") : null,
    );
    box.replaceChildren(tools, screen);
    this.xterm.open(screen);
    if (send) {
      this.xterm.onData((d) => {
        this.keys += d;
        if (!this.keyTimer) this.keyTimer = setTimeout(() => this.flushKeys(), KEY_BATCH_MS);
      });
    }
  }

  private flushKeys(): void {
    this.keyTimer = null;
    if (this.keys && this.send) this.send("input.keys", { text: this.keys });
    this.keys = "";
  }

  private fitRemote(): void {
    const dims = this.fit.proposeDimensions();
    if (dims && this.send) this.send("input.resize", { cols: dims.cols, rows: dims.rows });
  }

  /** Writes the bytes of new entries. */
  write(entries: Entry[]): void {
    for (const e of entries) {
      const b = typed(e);
      if (b?.kind === "agent.pty.output" && typeof b.payload.data === "string") this.xterm.write(b64(b.payload.data));
      else if (b?.kind === "agent.pty.resize" && b.payload.cols && b.payload.rows) this.xterm.resize(b.payload.cols, b.payload.rows);
    }
  }

  /** Starts over from `entries` (after older entries were loaded or the window was re-anchored). */
  reload(entries: Entry[]): void {
    this.xterm.reset();
    this.write(entries);
  }

  dispose(): void {
    this.xterm.dispose();
  }
}
