// Invitations: the roles owners offered the user by name. A session joins the user's list only
// when they accept; until then it is listed here, with Accept and Decline.

import { api, explain, type Role, type SessionOffer } from "../api";
import { clock, h } from "../dom";

const ROLE_WORD: Record<Role, string> = { viewer: "watch", controller: "watch and steer", owner: "own" };

/** "ann invites you to watch and steer build-42 (until 3 Jan 12:03)." */
export function offerText(o: SessionOffer): string {
  return `${o.offered_by} invites you to ${ROLE_WORD[o.role]} ${o.name} (until ${clock(o.expires_at)}).`;
}

/** What the share dialog says after adding `who` by name: offered (theirs once they accept),
 * or, for a member (or an administrator's change), done. */
export function addedText(who: string, role: Role, answer: { status: "offered" } | undefined): string {
  if (answer?.status === "offered") return `Offered ${who} the ${role} role: it is theirs once they accept it.`;
  return `${who} is now ${role === "owner" ? "an" : "a"} ${role} of this session.`;
}

/**
 * The session list's "Invitations" section: hidden while there are none. `refresh` reads the
 * offers again; `changed` runs after an Accept or Decline (the session list may have grown).
 */
export function invitations(changed: () => void): { el: HTMLElement; refresh: () => Promise<void> } {
  const list = h("ul.invitations-list");
  const status = h("p.bad", { id: "invitations-error", role: "alert", hidden: true });
  const el = h("section.invitations", { id: "invitations", hidden: true }, h("h2", null, "Invitations"), list, status);
  let offers: SessionOffer[] = [];
  const act = async (button: HTMLElement, what: string, call: () => Promise<unknown>) => {
    button.setAttribute("disabled", "");
    try {
      await call();
      status.hidden = true;
    } catch (e) {
      status.textContent = `Could not ${what}: ${explain(e)}`;
      status.hidden = false;
    }
    await refresh();
    changed();
  };
  const draw = () => {
    list.replaceChildren(
      ...offers.map((o) => {
        const accept = h("button.primary.offer-accept", { type: "button", onclick: () => void act(accept, "accept", () => api.acceptOffer(o.session)) }, "Accept");
        const decline = h("button.link.offer-decline", { type: "button", onclick: () => void act(decline, "decline", () => api.declineOffer(o.session)) }, "Decline");
        return h("li", { "data-offer": o.session, "data-role": o.role }, h("span", null, offerText(o)), h("span.actions", null, accept, decline));
      }),
    );
    el.hidden = offers.length === 0;
  };
  const refresh = async () => {
    try {
      offers = await api.offers();
    } catch {
      // The session list reports an unreachable server; an old list stays until the next read.
    }
    draw();
  };
  return { el, refresh };
}
