// An incremental Server-Sent Events parser (the WHATWG algorithm, minus what EventSource does
// with it): bytes in, events and comments out. The page reads SSE through fetch rather than
// EventSource so it sees keep-alive comments (for its watchdog), sends the token in a header and
// owns reconnection.

/** One dispatched event. */
export interface SseEvent {
  /** `event:` field, "message" when absent. */
  event: string;
  /** `data:` lines joined by "\n". */
  data: string;
  /** `id:` field of this event, if it had one. */
  id: string | null;
}

/** What one chunk of input produced. */
export interface SseOutput {
  events: SseEvent[];
  /** Comment lines (`: keep-alive`), without the colon. */
  comments: string[];
  /** A `retry:` value, if one came. */
  retry: number | null;
}

export class SseParser {
  private decoder = new TextDecoder();
  private buf = "";
  private data: string[] = [];
  private event = "";
  private id: string | null = null;
  private sawCR = false;

  /** Feeds bytes (or text); returns everything completed by them. */
  push(chunk: Uint8Array | string): SseOutput {
    let text = typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    if (this.sawCR && text.startsWith("\n")) text = text.slice(1);
    this.sawCR = text.endsWith("\r");
    this.buf += text;
    const out: SseOutput = { events: [], comments: [], retry: null };
    let start = 0;
    for (;;) {
      const nl = this.nextBreak(start);
      if (nl < 0) break;
      const line = this.buf.slice(start, nl);
      start = nl + (this.buf[nl] === "\r" && this.buf[nl + 1] === "\n" ? 2 : 1);
      this.line(line, out);
    }
    this.buf = this.buf.slice(start);
    return out;
  }

  private nextBreak(from: number): number {
    for (let i = from; i < this.buf.length; i++) {
      const c = this.buf.charCodeAt(i);
      if (c === 10) return i;
      if (c === 13) {
        // A CR at the very end may be the first half of CRLF: wait for more input.
        if (i === this.buf.length - 1) return i;
        return i;
      }
    }
    return -1;
  }

  private line(line: string, out: SseOutput): void {
    if (line === "") {
      if (this.data.length) {
        out.events.push({ event: this.event || "message", data: this.data.join("\n"), id: this.id });
      }
      this.data = [];
      this.event = "";
      this.id = null;
      return;
    }
    if (line.startsWith(":")) {
      out.comments.push(line.slice(1).trim());
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "data":
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) out.retry = Number(value);
        break;
    }
  }
}
