// The Invitations section and the share dialog's words for an offer, rendered into a minimal
// DOM (the tests run in node), against a fake server answering the client's real requests.
import { beforeEach, describe, expect, it } from "vitest";

class FakeNode {}
class FakeElement extends FakeNode {
  className = "";
  hidden = false;
  attrs = new Map<string, string>();
  kids: (FakeElement | string)[] = [];
  listeners = new Map<string, EventListener[]>();
  constructor(readonly tagName: string) {
    super();
  }
  setAttribute(k: string, v: string) {
    if (k === "hidden") this.hidden = true;
    this.attrs.set(k, v);
  }
  getAttribute(k: string) {
    return this.attrs.get(k) ?? null;
  }
  addEventListener(kind: string, f: EventListener) {
    this.listeners.set(kind, [...(this.listeners.get(kind) ?? []), f]);
  }
  append(...c: (FakeElement | string)[]) {
    this.kids.push(...c);
  }
  replaceChildren(...c: (FakeElement | string)[]) {
    this.kids = c;
  }
  set textContent(t: string) {
    this.kids = [t];
  }
  get textContent(): string {
    return this.kids.map((k) => (typeof k === "string" ? k : k.textContent)).join("");
  }
  click() {
    for (const f of this.listeners.get("click") ?? []) f({} as Event);
  }
  all(test: (e: FakeElement) => boolean): FakeElement[] {
    const own = test(this) ? [this] : [];
    return [...own, ...this.kids.flatMap((k) => (typeof k === "string" ? [] : k.all(test)))];
  }
}

const g = globalThis as Record<string, unknown>;
g.Node = FakeNode;
g.document = { createElement: (tag: string) => new FakeElement(tag) };
const store = () => {
  const m = new Map<string, string>();
  return { getItem: (k: string) => m.get(k) ?? null, setItem: (k: string, v: string) => void m.set(k, v), removeItem: (k: string) => void m.delete(k) };
};
g.localStorage = store();
g.sessionStorage = store();
g.location = { hash: "#/", pathname: "/", search: "" };

/** A fake moord: the offers it holds, and every request it was sent. */
let offers: Record<string, unknown>[] = [];
let sent: string[] = [];
g.fetch = async (url: string, init: RequestInit = {}) => {
  const method = init.method ?? "GET";
  sent.push(`${method} ${url}`);
  const json = (status: number, body: unknown) => new Response(body === undefined ? null : JSON.stringify(body), { status });
  if (method === "GET" && url === "/api/v1/offers") return json(200, offers);
  const accept = url.match(/^\/api\/v1\/offers\/([^/]+)\/accept$/);
  if (method === "POST" && accept) {
    const o = offers.find((x) => x.session === accept[1]);
    offers = offers.filter((x) => x !== o);
    return o ? json(200, { session: o.session, role: o.role }) : json(404, { code: "not_found", message: "offer not found" });
  }
  const decline = url.match(/^\/api\/v1\/offers\/([^/]+)$/);
  if (method === "DELETE" && decline) {
    offers = offers.filter((x) => x.session !== decline[1]);
    return json(204, undefined);
  }
  return json(404, { code: "not_found", message: "route not found" });
};

const { addedText, invitations, offerText } = await import("../src/views/offers");

const offer = (session: string, name: string, role: string) => ({
  session,
  name,
  role,
  offered_by: "ann",
  offered_at: 1,
  expires_at: Date.UTC(2030, 0, 3, 12, 0),
});

const until = async (what: string, cond: () => boolean) => {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error(`timed out: ${what}`);
};

describe("invitations", () => {
  beforeEach(() => {
    offers = [offer("s-1", "build-42", "controller"), offer("s-2", "docs", "viewer")];
    sent = [];
  });

  it("lists each offer with who offers what, and Accept asks the server and reads the list again", async () => {
    let changed = 0;
    const inv = invitations(() => changed++);
    const el = inv.el as unknown as FakeElement;
    await inv.refresh();

    const rows = el.all((e) => e.attrs.has("data-offer"));
    expect(el.hidden).toBe(false);
    expect(el.textContent).toContain("Invitations");
    expect(rows.map((r) => r.getAttribute("data-offer"))).toEqual(["s-1", "s-2"]);
    expect(rows[0].textContent).toContain("ann invites you to watch and steer build-42");
    expect(rows[0].textContent).toContain("Accept");
    expect(rows[0].textContent).toContain("Decline");

    rows[0].all((e) => e.className.includes("offer-accept"))[0].click();
    await until("accepted and re-read", () => changed === 1);
    expect(sent).toEqual(["GET /api/v1/offers", "POST /api/v1/offers/s-1/accept", "GET /api/v1/offers"]);
    expect(el.all((e) => e.attrs.has("data-offer")).map((r) => r.getAttribute("data-offer"))).toEqual(["s-2"]);
  });

  it("Decline deletes the offer, and the section hides once none is left", async () => {
    offers = [offer("s-2", "docs", "viewer")];
    let changed = 0;
    const inv = invitations(() => changed++);
    const el = inv.el as unknown as FakeElement;
    await inv.refresh();

    el.all((e) => e.className.includes("offer-decline"))[0].click();
    await until("declined and re-read", () => changed === 1);

    expect(sent).toEqual(["GET /api/v1/offers", "DELETE /api/v1/offers/s-2", "GET /api/v1/offers"]);
    expect(el.hidden).toBe(true);
  });
});

describe("words for an offer", () => {
  it("the share dialog says offered for an offer, done for a member's change", () => {
    expect(addedText("bob", "viewer", { status: "offered" })).toBe("Offered bob the viewer role: it is theirs once they accept it.");
    expect(addedText("bob", "owner", undefined)).toBe("bob is now an owner of this session.");
  });

  it("an invitation names the inviter, the role and the session", () => {
    expect(offerText(offer("s", "web", "owner") as never)).toMatch(/^ann invites you to own web \(until .+\)\.$/);
  });
});
