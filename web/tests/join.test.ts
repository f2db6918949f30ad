import { describe, expect, it } from "vitest";
import { joiningText, linkOf } from "../src/views/access";

describe("the page a share link opens", () => {
  it("finds the link's secret in the route the login returns to", () => {
    expect(linkOf("#/join&link=abc-DEF_1")).toBe("abc-DEF_1");
    expect(linkOf("#/s/x")).toBe("");
    expect(linkOf("")).toBe("");
    expect(linkOf("#/join")).toBe("");
  });

  it("says what you are joining and as which role, in words", () => {
    const p = { session: "id", name: "deploy", role: "controller" as const, created_by: "ann" };
    expect(joiningText(p)).toBe("You are joining “deploy” as a controller: you can watch, write to the agent and approve or deny its requests. Shared by ann.");
    expect(joiningText({ ...p, role: "viewer" })).toMatch(/as a viewer: you can watch the session/);
  });
});
