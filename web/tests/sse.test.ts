import { describe, expect, it } from "vitest";
import { SseParser } from "../src/sse";

const STREAM =
  "retry: 1000\n\n: keep-alive\n\nid: 1\nevent: agent.output\ndata: {\"seq\":1}\n\n" +
  "event: state\ndata: {\"head\":1}\n\nid: 2\nevent: agent.output\ndata: a\ndata: b\n\n";

describe("SseParser", () => {
  it("yields the same events however the bytes are split", () => {
    const whole = new SseParser().push(STREAM);
    expect(whole.retry).toBe(1000);
    expect(whole.comments).toEqual(["keep-alive"]);
    expect(whole.events).toEqual([
      { event: "agent.output", data: '{"seq":1}', id: "1" },
      { event: "state", data: '{"head":1}', id: null },
      { event: "agent.output", data: "a\nb", id: "2" },
    ]);
    const bytes = new TextEncoder().encode(STREAM);
    for (const size of [1, 2, 3, 7, 13]) {
      const p = new SseParser();
      const events = [];
      for (let i = 0; i < bytes.length; i += size) events.push(...p.push(bytes.slice(i, i + size)).events);
      expect(events).toEqual(whole.events);
    }
  });

  it("handles CRLF line ends and multi-byte characters split across chunks", () => {
    const bytes = new TextEncoder().encode("data: héllo ✓\r\n\r\n");
    const p = new SseParser();
    const events = [];
    for (const b of bytes) events.push(...p.push(new Uint8Array([b])).events);
    expect(events).toEqual([{ event: "message", data: "héllo ✓", id: null }]);
  });
});
