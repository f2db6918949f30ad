import "fake-indexeddb/auto";
import { describe, expect, it } from "vitest";
import { Outbox } from "../src/outbox";
import type { InputRequest } from "../src/protocol/InputRequest";

const until = async (what: string, cond: () => boolean) => {
  for (let i = 0; i < 400; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out: ${what}`);
};

describe("Outbox", () => {
  it("keeps a message until the server has it, across a reload, with one client id", async () => {
    const seen: InputRequest[] = [];
    let up = false;
    const post = async (_s: string, req: InputRequest) => {
      seen.push(req);
      if (!up) throw new TypeError("Failed to fetch");
      return { seq: 42, duplicate: seen.filter((r) => r.client_msg_id === req.client_msg_id).length > 1, queued: false };
    };
    const box = await Outbox.open(post, "test-reload");
    expect(box.volatile).toBe(false);
    const rec = await box.send("s1", "input.text", { text: "hi" });
    await until("a first attempt", () => seen.length >= 1);
    expect(box.list("s1")[0].seq).toBeNull();

    // "Reload": a new outbox on the same database still has it and sends it when up.
    up = true;
    const again = await Outbox.open(post, "test-reload");
    expect(again.list("s1").map((r) => r.client_msg_id)).toEqual([rec.client_msg_id]);
    again.pump();
    await until("stored", () => again.list("s1")[0]?.seq === 42);
    expect(new Set(seen.map((r) => r.client_msg_id))).toEqual(new Set([rec.client_msg_id]));

    // Once the log holds its entry, it leaves the outbox (and the database).
    await again.settle("s1", 41);
    expect(again.list("s1").length).toBe(1);
    await again.settle("s1", 42);
    expect(again.list("s1")).toEqual([]);
    expect((await Outbox.open(post, "test-reload")).list("s1")).toEqual([]);
  });

  it("sends in the order written and does not retry a refused message", async () => {
    const order: string[] = [];
    const post = async (_s: string, req: InputRequest) => {
      const text = (req.payload as { text: string }).text;
      order.push(text);
      if (text === "bad") throw Object.assign(new Error("refused"), { status: 400 });
      return { seq: order.length, duplicate: false, queued: false };
    };
    const box = await Outbox.open(post, "test-order");
    for (const t of ["a", "bad", "c"]) await box.send("s", "input.text", { text: t });
    await until("all tried", () => box.list("s").every((r) => r.seq !== null || r.error !== null));
    expect(order).toEqual(["a", "bad", "c"]);
    expect(box.list("s").find((r) => (r.payload as { text: string }).text === "bad")?.error).toBe("refused");
  });

  it("keeps a message refused for want of a login, and sends it once logged in again", async () => {
    let loggedIn = false;
    let tries = 0;
    const post = async () => {
      tries += 1;
      if (!loggedIn) throw Object.assign(new Error("missing or invalid token"), { status: 401 });
      return { seq: 7, duplicate: false, queued: false };
    };
    const box = await Outbox.open(post, "test-login");
    await box.send("s", "input.text", { text: "after lunch" });
    await until("a first attempt", () => tries >= 1);
    expect(box.list("s")[0].error).toBeNull();
    expect(box.list("s")[0].seq).toBeNull();
    loggedIn = true;
    box.pump();
    await until("stored", () => box.list("s")[0]?.seq === 7);
  });
});
