// Access pages: log in, create the first admin, approve a device (`moor login`), join through a
// share link. Each says plainly what went wrong; none ever shows or stores a password.

import { api, ApiError, explain, needLogin, peekReturn, setToken, takeReturn, type LinkPreview } from "../api";
import { setTitle } from "../attention";
import { h, themeButton } from "../dom";
import type { Me } from "../protocol/Me";

function page(root: HTMLElement, title: string, ...body: (Node | null)[]): void {
  setTitle(`${title} · Mooring`);
  root.replaceChildren(
    h("header.top", null, h("div.row", null, h("a.icon", { href: "#/", "aria-label": "Sessions" }, "‹"), h("h1.title", null, title), h("div.spacer"), themeButton())),
    h("main.access", null, ...body),
  );
}

function field(label: string, input: HTMLInputElement): HTMLElement {
  return h("label.field", null, h("span", null, label), input);
}

function input(attrs: Record<string, string | boolean>): HTMLInputElement {
  return h("input", { required: true, ...attrs }) as HTMLInputElement;
}

function errorBox(id: string): HTMLElement {
  return h("p.form-error", { id, role: "alert", hidden: true });
}

function showError(box: HTMLElement, text: string): void {
  box.textContent = text;
  box.hidden = false;
}

/** `#/login`: name and password; afterwards back to where the user was. */
export function loginView(root: HTMLElement): void {
  const name = input({ id: "login-name", name: "username", autocomplete: "username", autocapitalize: "off", spellcheck: false });
  const password = input({ id: "login-password", name: "password", type: "password", autocomplete: "current-password" });
  const err = errorBox("login-error");
  const submit = h("button.primary", { type: "submit", id: "login-submit" }, "Log in");
  const form = h(
    "form.access-form",
    { id: "login-form" },
    field("Name", name),
    field("Password", password),
    err,
    submit,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    err.hidden = true;
    submit.setAttribute("disabled", "");
    try {
      await api.login(name.value.trim(), password.value);
      password.value = "";
      location.hash = takeReturn();
    } catch (e) {
      password.value = "";
      if (e instanceof ApiError && e.status === 401) showError(err, "Wrong name or password.");
      else showError(err, explain(e));
      password.focus();
    } finally {
      submit.removeAttribute("disabled");
    }
  });
  // The admin token moord prints still opens everything (a server without users yet).
  const tokenInput = input({ id: "token-input", type: "password", autocomplete: "off", placeholder: "admin token" });
  const tokenForm = h(
    "form.access-form.token-form",
    {
      onsubmit: (e: Event) => {
        e.preventDefault();
        setToken(tokenInput.value);
        location.hash = takeReturn();
      },
    },
    tokenInput,
    h("button", { type: "submit" }, "Use token"),
  );
  // Reached from a share link: say what logging in will join, and as which role.
  const joining = joiningNote(linkOf(peekReturn()));
  page(
    root,
    "Log in",
    joining,
    form,
    h("details.token-alt", null, h("summary", null, "Use an access token instead"), h("p.muted", null, "Paste the admin token moord printed at its first start."), tokenForm),
  );
  name.focus();
}

/** `#/setup&code=…`: the first admin account, with the one-time code moord printed. */
export function setupView(root: HTMLElement, code: string): void {
  const status = h("p.muted", { id: "setup-status" }, "Checking…");
  page(root, "Set up Mooring", status);
  void (async () => {
    try {
      const s = await api.setupStatus();
      if (!s.open) {
        location.hash = "#/login";
        return;
      }
    } catch (e) {
      if (e instanceof ApiError && e.status === 410) {
        // The first admin exists: this link has done its job.
        location.hash = "#/login";
        return;
      }
      status.textContent = e instanceof ApiError && e.status === 404 ? "This server has no first-admin setup." : explain(e);
      return;
    }
    const name = input({ id: "setup-name", autocomplete: "username", autocapitalize: "off", spellcheck: false });
    const pw = input({ id: "setup-password", type: "password", autocomplete: "new-password", minlength: "8" });
    const pw2 = input({ id: "setup-password2", type: "password", autocomplete: "new-password", minlength: "8" });
    const err = errorBox("setup-error");
    const submit = h("button.primary", { type: "submit", id: "setup-submit" }, "Create the admin account");
    const form = h("form.access-form", { id: "setup-form" }, field("Name", name), field("Password (8 or more characters)", pw), field("Password again", pw2), err, submit);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      err.hidden = true;
      if (pw.value !== pw2.value) return showError(err, "The two passwords differ.");
      if (!code) return showError(err, "This link has no setup code: open the link moord printed.");
      submit.setAttribute("disabled", "");
      try {
        await api.setup(code, name.value.trim(), pw.value);
        pw.value = pw2.value = "";
        location.hash = takeReturn();
      } catch (e) {
        if (e instanceof ApiError && e.status === 410) location.hash = "#/login";
        else showError(err, explain(e));
      } finally {
        submit.removeAttribute("disabled");
      }
    });
    status.textContent = "Create the first account. It manages users and owns every session.";
    status.after(form);
    name.focus();
  })();
}

/** The logged-in user, or null after sending the page to the login (which comes back here). */
async function loggedIn(status: HTMLElement): Promise<Me | null> {
  try {
    return await api.me();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      needLogin();
      return null;
    }
    status.textContent = explain(e);
    return null;
  }
}

/** Asks the admin-token holder to log in as a user instead. */
function asUser(text: string): HTMLElement {
  return h(
    "div",
    null,
    h("p", null, text),
    h(
      "button",
      {
        type: "button",
        id: "login-as-user",
        onclick: () => {
          localStorage.removeItem("moor.token");
          needLogin();
        },
      },
      "Log in as a user",
    ),
  );
}

/** `#/device&code=…`: approve or deny a `moor login` waiting with this code. */
export function deviceView(root: HTMLElement, code: string): void {
  const status = h("p.muted", { id: "device-status" }, "Checking your login…");
  page(root, "Approve a device", status);
  void (async () => {
    const me = await loggedIn(status);
    if (!me) return;
    if (me.bootstrap) {
      status.replaceWith(asUser("The admin token has no account to lend a device. Log in as the user the device should act as."));
      return;
    }
    const codeInput = input({ id: "device-code", value: code, autocapitalize: "characters", autocomplete: "off", spellcheck: false, placeholder: "ABCD-EFGH" });
    const result = h("p", { id: "device-result", role: "status" });
    const err = errorBox("device-error");
    const approve = h("button.approve", { type: "button", id: "device-approve" }, "Approve");
    const deny = h("button.deny", { type: "button", id: "device-deny" }, "Deny");
    const act = async (ok: boolean) => {
      err.hidden = true;
      const c = codeInput.value.trim();
      if (!c) return showError(err, "Enter the code the device shows.");
      approve.setAttribute("disabled", "");
      deny.setAttribute("disabled", "");
      try {
        if (ok) await api.approveDevice(c);
        else await api.denyDevice(c);
        result.dataset.result = ok ? "approved" : "denied";
        result.textContent = ok ? `Approved: the device is logged in as ${me.name}.` : "Denied: the device was not logged in.";
        actions.remove();
        codeInput.setAttribute("readonly", "");
      } catch (e) {
        showError(err, e instanceof ApiError && e.status === 404 ? "No device is waiting with this code (it may have expired: run moor login again)." : explain(e));
        approve.removeAttribute("disabled");
        deny.removeAttribute("disabled");
      }
    };
    approve.addEventListener("click", () => void act(true));
    deny.addEventListener("click", () => void act(false));
    const actions = h("div.actions", null, deny, approve);
    status.textContent = `A device asks to act as ${me.name}. Approve only if the same code is on its screen:`;
    status.after(h("div.access-form", null, field("Code", codeInput), err, actions, result));
    codeInput.classList.add("code");
  })();
}

/** What each role may do, in words. */
export const ROLE_WORDS: Record<string, string> = {
  viewer: "a viewer: you can watch the session",
  controller: "a controller: you can watch, write to the agent and approve or deny its requests",
  owner: "an owner: you can do everything, including sharing it",
};

/** "You are joining «name» as …", from the server's word on the link. */
export function joiningText(p: LinkPreview): string {
  return `You are joining “${p.name}” as ${ROLE_WORDS[p.role] ?? p.role}. Shared by ${p.created_by}.`;
}

/** The share link secret of a `#/join&link=…` route, or "". */
export function linkOf(hash: string): string {
  if (!hash.startsWith("#/join")) return "";
  return new URLSearchParams(hash.slice(1).split("&").slice(1).join("&")).get("link") ?? "";
}

/**
 * A note saying what a share link grants (asked of the server, which answers without a login),
 * or that it grants nothing any more; null without a link.
 */
function joiningNote(link: string): HTMLElement | null {
  if (!link) return null;
  const note = h("p.join-what", { id: "join-what", role: "status" }, "Checking the share link…");
  api.previewShareLink(link).then(
    (p) => {
      note.dataset.role = p.role;
      note.textContent = joiningText(p);
    },
    (e) => {
      note.className = "bad";
      note.textContent = e instanceof ApiError && e.status === 404 ? DEAD_LINK : `Cannot check the share link: ${explain(e)}`;
    },
  );
  return note;
}

const DEAD_LINK = "This share link is unknown, expired, used up or revoked: ask for a new one.";

/** `#/join&link=…`: says what the link grants, redeems it (after logging in), opens the session. */
export function joinView(root: HTMLElement, link: string): void {
  const status = h("p.muted", { id: "join-status" }, "Joining…");
  page(root, "Join a session", joiningNote(link), status);
  void (async () => {
    if (!link) {
      status.textContent = "This link has no share token.";
      return;
    }
    const me = await loggedIn(status);
    if (!me) return;
    if (me.admin) {
      status.replaceWith(asUser("Administrators own every session already; share links are for other user accounts."));
      return;
    }
    try {
      const joined = await api.redeemShareLink(link);
      location.replace(`#/s/${encodeURIComponent(joined.session)}`);
    } catch (e) {
      status.className = "bad";
      status.textContent =
        e instanceof ApiError && e.status === 404 ? DEAD_LINK : explain(e);
    }
  })();
}
