// The page's live stream against a fake server (fetch answered here, the SSE body written by the
// test): a reset that says what compaction removed is taken and the stream goes on with the kept
// entries; a reset without it still ends the stream.
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Compacted } from "../src/protocol/Compacted";
import type { Entry } from "../src/protocol/Entry";
import type { Reset } from "../src/protocol/Reset";
import type { SessionInfo } from "../src/protocol/SessionInfo";
import { LiveStream, type StreamStatus } from "../src/stream";
import { EntryWindow } from "../src/window";

// What the stream touches of a browser, in node.
const g = globalThis as Record<string, unknown>;
g.window ??= new EventTarget();
g.document ??= Object.assign(new EventTarget(), { visibilityState: "visible" });
const kept = new Map<string, string>();
g.localStorage ??= { getItem: (k: string) => kept.get(k) ?? null, setItem: (k: string, v: string) => kept.set(k, v), removeItem: (k: string) => kept.delete(k) };
Object.defineProperty(globalThis, "navigator", { value: { onLine: true }, configurable: true });

const KINDS = ["agent.pty.output", "agent.text.delta"];
const entry = (seq: number, kind = "agent.output"): Entry => ({ seq, ts: seq, kind, author: "bridge", payload: { text: `line-${seq}` } });
const sse = (e: Entry) => `id: ${e.seq}\nevent: ${e.kind}\ndata: ${JSON.stringify(e)}\n\n`;
const mark = (after: number, through: number, entries = 9): Compacted => ({ after, through, kinds: KINDS, entries, bytes: entries * 100 });
const resetEvent = (r: Reset) => `event: reset\ndata: ${JSON.stringify(r)}\n\n`;
const info = (head: number) => ({ id: "s", name: "s", head_seq: head }) as unknown as SessionInfo;

/** A fake moord: each `/events` request gets a body the test writes into; `/sessions/s` answers `head`. */
function server(head: number) {
  const streams: { after: number; write(text: string): void }[] = [];
  const fetch = vi.fn(async (url: string) => {
    if (url.includes("/events")) {
      let ctrl!: ReadableStreamDefaultController<Uint8Array>;
      const body = new ReadableStream<Uint8Array>({ start: (c) => void (ctrl = c) });
      const after = Number(/after=(\d+)/.exec(url)?.[1]);
      streams.push({ after, write: (text) => ctrl.enqueue(new TextEncoder().encode(text)) });
      return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
    }
    return new Response(JSON.stringify(info(head)), { status: 200, headers: { "Content-Type": "application/json" } });
  });
  g.fetch = fetch;
  return { streams, fetch };
}

/** A stream over a real window holding 1..`hi`, recording what its hooks were told. */
function follow(hi: number, head: number) {
  const win = new EntryWindow(0);
  win.append(Array.from({ length: hi }, (_, i) => entry(i + 1)));
  const seen = { statuses: [] as StreamStatus[], compacted: [] as Compacted[], resets: [] as Reset[] };
  const stream = new LiveStream(
    "s",
    {
      cursor: () => win.hi,
      onEntries: (b) => void win.append(b),
      onState: () => {},
      onInfo: () => {},
      onReset: (r) => {
        seen.resets.push(r);
        win.reset(r.head_seq);
      },
      onCompacted: (c) => {
        seen.compacted.push(c);
        win.noteCompacted(c);
      },
      onStatus: (s) => seen.statuses.push(s),
    },
    { watchdogMs: 60000, backoffInitialMs: 1, backoffMaxMs: 1 },
  );
  stream.start(info(head));
  return { win, seen, stream };
}

let stop: (() => void) | null = null;
afterEach(() => {
  stop?.();
  stop = null;
});

describe("LiveStream and compaction", () => {
  it("takes a compacted reset and goes on with the kept entries, in the same stream", async () => {
    const srv = server(20);
    const { win, seen, stream } = follow(3, 20);
    stop = () => stream.stop();
    await vi.waitFor(() => expect(srv.streams.length).toBe(1));
    expect(srv.streams[0].after).toBe(3);
    const first = mark(3, 15);
    srv.streams[0].write(`retry: 1000\n\n${resetEvent({ reason: "compaction", head_seq: 20, compacted: first })}${sse(entry(5))}${sse(entry(9, "input.keys"))}`);
    await vi.waitFor(() => expect(win.hi).toBe(9));
    expect(seen.compacted).toEqual([first]);
    expect(seen.statuses.at(-1)).toEqual({ kind: "catching-up", missed: 17, got: 2, resumed: false, compacted: true });
    // Compaction moved on while the stream was read: a second reset, true for its cursor.
    srv.streams[0].write(resetEvent({ reason: "compaction", head_seq: 20, compacted: mark(9, 18, 12) }));
    srv.streams[0].write([16, 19, 20, 21].map((s) => sse(entry(s))).join(""));
    await vi.waitFor(() => expect(win.hi).toBe(21));
    expect(win.entries.map((e) => e.seq)).toEqual([1, 2, 3, 5, 9, 16, 19, 20, 21]);
    expect(seen.compacted.map((c) => c.through)).toEqual([15, 18]);
    expect(seen.resets).toEqual([]);
    // Caught up at the head, counting the entries that came (not the seqs passed).
    expect(seen.statuses.find((s) => s.kind === "live")).toMatchObject({ kind: "live", replayed: 5, resumed: false });
    expect(srv.streams.length).toBe(1);
  });

  it("ends the stream on a reset without compacted, and starts again where the hook put the cursor", async () => {
    const srv = server(2);
    const { win, seen, stream } = follow(3, 2);
    stop = () => stream.stop();
    await vi.waitFor(() => expect(srv.streams.length).toBe(1));
    srv.streams[0].write(resetEvent({ reason: "cursor 3 is ahead of the log head 2", head_seq: 2 }) + sse(entry(4)));
    await vi.waitFor(() => expect(srv.streams.length).toBe(2));
    expect(seen.resets.map((r) => r.head_seq)).toEqual([2]);
    expect(seen.compacted).toEqual([]);
    // Nothing after the reset was taken from the stream that ended; the next one starts after the new anchor.
    expect(win.entries).toEqual([]);
    expect(srv.streams[1].after).toBe(2);
    expect(seen.statuses).toContainEqual(expect.objectContaining({ kind: "reconnecting", reason: "the server reset the cursor" }));
  });

  it("is caught up when compaction took everything up to the head and the server goes quiet", async () => {
    const srv = server(20);
    const { win, seen, stream } = follow(3, 20);
    stop = () => stream.stop();
    await vi.waitFor(() => expect(srv.streams.length).toBe(1));
    srv.streams[0].write(resetEvent({ reason: "compaction", head_seq: 20, compacted: mark(3, 20) }) + sse(entry(7, "input.keys")));
    await vi.waitFor(() => expect(win.hi).toBe(7));
    expect(seen.statuses.at(-1)?.kind).toBe("catching-up");
    // The cursor can never reach 20 (8..20 are gone): the keep-alive says nothing more is coming.
    srv.streams[0].write(": keep-alive\n\n");
    await vi.waitFor(() => expect(seen.statuses.at(-1)).toMatchObject({ kind: "live", replayed: 1 }));
    expect(win.hi).toBe(7);
  });

  it("still restarts on a gap no compaction explains", async () => {
    const srv = server(20);
    const { win, seen, stream } = follow(3, 20);
    stop = () => stream.stop();
    await vi.waitFor(() => expect(srv.streams.length).toBe(1));
    srv.streams[0].write(resetEvent({ reason: "compaction", head_seq: 20, compacted: mark(3, 10) }) + sse(entry(12)));
    await vi.waitFor(() => expect(srv.streams.length).toBe(2));
    expect(win.hi).toBe(3);
    expect(seen.statuses).toContainEqual(expect.objectContaining({ kind: "reconnecting", reason: "gap in the stream (expected seq 4, got 12)" }));
  });
});
