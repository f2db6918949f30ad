import { describe, expect, it } from "vitest";
import { adoptableToken, splitFragmentToken } from "../src/api";
import type { Me } from "../src/protocol/Me";

const admin: Me = { name: "admin", admin: true, bootstrap: true };
const mallory: Me = { name: "mallory", admin: false, bootstrap: false };
const ann: Me = { name: "ann", admin: false, bootstrap: false };

/** A server that knows `tokens`, and whose cookies (if any) are `cookieUser`'s. */
function server(tokens: Record<string, Me>, cookieUser: Me | null) {
  const asked: (string | null)[] = [];
  const whoIs = async (t: string | null) => {
    asked.push(t);
    return t === null ? cookieUser : (tokens[t] ?? null);
  };
  return { whoIs, asked };
}

describe("a token in the URL fragment", () => {
  it("is taken out of the fragment, keeping the route", () => {
    expect(splitFragmentToken("#/s/abc&token=t%2B1&x=2")).toEqual({ token: "t+1", rest: "#/s/abc&x=2" });
    expect(splitFragmentToken("#token=t1")).toEqual({ token: "t1", rest: "" });
    expect(splitFragmentToken("#/s/abc")).toEqual({ token: null, rest: "#/s/abc" });
    expect(splitFragmentToken("#token=")).toEqual({ token: null, rest: "" });
  });

  it("is adopted when it is the bootstrap admin token and the page has no session", async () => {
    const s = server({ "admin-token": admin }, null);
    expect(await adoptableToken("admin-token", "", s.whoIs)).toBe(true);
  });

  it("never logs the browser into another account (an attacker's access token)", async () => {
    const s = server({ "mallory-jwt": mallory }, null);
    expect(await adoptableToken("mallory-jwt", "", s.whoIs)).toBe(false);
  });

  it("is ignored by a page that is logged in with cookies, even for the admin token", async () => {
    const s = server({ "admin-token": admin }, ann);
    expect(await adoptableToken("admin-token", "", s.whoIs)).toBe(false);
    expect(s.asked).toEqual([null]);
  });

  it("never replaces a stored token, and asks the server nothing then", async () => {
    const s = server({ "admin-token": admin, "mallory-jwt": mallory }, null);
    expect(await adoptableToken("mallory-jwt", "admin-token", s.whoIs)).toBe(false);
    expect(await adoptableToken("admin-token", "other-token", s.whoIs)).toBe(false);
    expect(s.asked).toEqual([]);
  });

  it("is not adopted when the server refuses it", async () => {
    const s = server({}, null);
    expect(await adoptableToken("made-up", "", s.whoIs)).toBe(false);
  });
});
