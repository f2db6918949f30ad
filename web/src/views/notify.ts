// "Notify me on this device": subscribes this browser to Web Push after a click (browsers
// require a user action), registers it with moord under a device label, and removes it again.
// iOS delivers Web Push only to a web app added to the home screen, on iOS 16.4 or later.

import { authHeaders } from "../api";
import { h } from "../dom";
import type { NewNotifySink } from "../protocol/NewNotifySink";
import type { NotifyClass } from "../protocol/NotifyClass";
import type { NotifyMutes } from "../protocol/NotifyMutes";
import type { NotifySinkInfo } from "../protocol/NotifySinkInfo";
import type { PushSubscriptionInfo } from "../protocol/PushSubscriptionInfo";
import type { QuietHours } from "../protocol/QuietHours";
import type { SinkKind } from "../protocol/SinkKind";
import type { VapidKey } from "../protocol/VapidKey";

const IOS_NOTE = "On iPhone and iPad: add Mooring to the home screen first (Share → Add to Home Screen, iOS 16.4 or later), then turn this on from there.";

/** The device label moord lists: a short guess from the user agent. */
export function deviceLabel(ua: string): string {
  if (/iPhone|iPad/.test(ua)) return "iPhone/iPad";
  if (/Android/.test(ua)) return "Android";
  if (/Mac OS X/.test(ua)) return "Mac";
  if (/Windows/.test(ua)) return "Windows";
  if (/Linux/.test(ua)) return "Linux";
  return "browser";
}

/** A base64url string as the bytes `applicationServerKey` takes. */
export function keyBytes(b64url: string): Uint8Array<ArrayBuffer> {
  const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((b64url.length + 3) % 4);
  const bytes = new Uint8Array(new ArrayBuffer(atob(b64).length));
  bytes.set(Array.from(atob(b64), (c) => c.charCodeAt(0)));
  return bytes;
}

async function call<T>(method: string, path: string, body?: unknown): Promise<T | null> {
  const res = await fetch(`/api/v1/notify/${path}`, {
    method,
    credentials: "same-origin",
    headers: { ...authHeaders(), ...(body ? { "Content-Type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status}`);
  return res.status === 204 ? null : ((await res.json()) as T);
}

/** The switch; its state is whether this browser's subscription is registered with moord. */
export function notifySwitch(): HTMLElement {
  const box = h("input", { type: "checkbox", id: "notify-switch" }) as HTMLInputElement;
  const note = h("span.muted", { id: "notify-note" });
  const el = h("label.notify", null, box, " Notify me on this device ", note);
  const supported = "serviceWorker" in navigator && "PushManager" in window && window.isSecureContext;
  if (!supported) {
    box.disabled = true;
    note.textContent = /iPhone|iPad/.test(navigator.userAgent) ? IOS_NOTE : "(this browser cannot receive notifications here)";
    return el;
  }
  const current = async () => (await navigator.serviceWorker.ready).pushManager.getSubscription();
  void (async () => {
    const sub = await current();
    if (!sub) return;
    const mine = (await call<PushSubscriptionInfo[]>("GET", "subscriptions")) ?? [];
    box.checked = mine.some((s) => s.endpoint === sub.endpoint);
  })().catch(() => {});
  box.addEventListener("change", () => {
    void (async () => {
      note.textContent = "";
      if (box.checked) {
        if ((await Notification.requestPermission()) !== "granted") {
          box.checked = false;
          note.textContent = "(notifications are blocked for this site)";
          return;
        }
        const key = await call<VapidKey>("GET", "vapid");
        const reg = await navigator.serviceWorker.ready;
        const sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(key!.public_key) });
        const json = sub.toJSON();
        await call("POST", "subscriptions", { device: deviceLabel(navigator.userAgent), endpoint: sub.endpoint, keys: json.keys });
      } else {
        const sub = await current();
        const mine = (await call<PushSubscriptionInfo[]>("GET", "subscriptions")) ?? [];
        for (const s of mine.filter((s) => s.endpoint === sub?.endpoint)) await call("DELETE", `subscriptions/${encodeURIComponent(s.id)}`);
        await sub?.unsubscribe();
      }
    })().catch((e: Error) => {
      box.checked = !box.checked;
      note.textContent = `(${e.message})`;
    });
  });
  return el;
}

/** One line of the sinks list: what it is and where it posts. */
export function sinkLine(s: Pick<NotifySinkInfo, "kind" | "label" | "url">): string {
  return `${s.kind === "ntfy" ? "ntfy" : "webhook"} · ${s.label} · ${s.url}`;
}

/** The caller's ntfy topics and webhooks: listed, added (a webhook's secret shown once), removed. */
export function sinksPanel(): HTMLElement {
  const list = h("ul.sinks", { id: "notify-sinks" });
  const note = h("div.muted", { id: "notify-sinks-note" });
  const kind = h("select", { id: "sink-kind" }, h("option", { value: "ntfy" }, "ntfy topic"), h("option", { value: "webhook" }, "webhook")) as HTMLSelectElement;
  const label = h("input", { id: "sink-label", placeholder: "label", maxlength: 64 }) as HTMLInputElement;
  const url = h("input", { id: "sink-url", placeholder: "https://ntfy.sh/my-topic", type: "url" }) as HTMLInputElement;
  const token = h("input", { id: "sink-token", placeholder: "ntfy access token (optional)" }) as HTMLInputElement;
  const refresh = async () => {
    const sinks = (await call<NotifySinkInfo[]>("GET", "sinks")) ?? [];
    list.replaceChildren(
      ...sinks.map((s) =>
        h(
          "li",
          null,
          sinkLine(s),
          " ",
          h("button", {
            onclick: () => void call("DELETE", `sinks/${encodeURIComponent(s.id)}`).then(refresh, (e: Error) => (note.textContent = e.message)),
          }, "Remove"),
        ),
      ),
    );
  };
  const add = h("button", { id: "sink-add" }, "Add") as HTMLButtonElement;
  add.addEventListener("click", () => {
    const body: NewNotifySink = { kind: kind.value as SinkKind, label: label.value.trim(), url: url.value.trim() };
    if (body.kind === "ntfy" && token.value.trim()) body.token = token.value.trim();
    void call<NotifySinkInfo>("POST", "sinks", body)
      .then((made) => {
        note.textContent = made?.secret ? `Webhook secret (shown once; it signs X-Moor-Signature): ${made.secret}` : "";
        label.value = url.value = token.value = "";
        return refresh();
      })
      .catch((e: Error) => (note.textContent = e.message));
  });
  void refresh().catch(() => {});
  return h("details.notify-sinks", null, h("summary", null, "Also notify: ntfy and webhooks"), list, h("div.row", null, kind, label, url, token, add), note);
}

/** What each class is, as its switch says it ("Notify me when …"), in the server's order. */
export const CLASS_LABELS: ReadonlyArray<[NotifyClass, string]> = [
  ["permission", "a permission is waiting"],
  ["turn", "a turn finished"],
  ["stalled", "the agent stalled"],
  ["crashed", "the agent crashed"],
  ["bridge_lost", "the bridge is lost"],
  ["input_failed", "an input failed"],
  ["ended", "a session ended"],
  ["summary", "a summary after an outage"],
];

/** Each class with whether its switch is on (not muted). */
export function classSwitches(mutes: Pick<NotifyMutes, "classes">): Array<{ class: NotifyClass; label: string; on: boolean }> {
  return CLASS_LABELS.map(([c, label]) => ({ class: c, label, on: !mutes.classes.includes(c) }));
}

/** A switch that mutes (off) or unmutes (on) `path` under /api/v1/notify/mutes; it shows what
 * moord answered, and goes back if moord refused. */
function muteSwitch(id: string, label: string, path: string, on: boolean, note: HTMLElement): HTMLElement {
  const box = h("input", { type: "checkbox", id }) as HTMLInputElement;
  box.checked = on;
  box.addEventListener("change", () => {
    note.textContent = "";
    void call(box.checked ? "DELETE" : "PUT", `mutes/${path}`).catch((e: Error) => {
      box.checked = !box.checked;
      note.textContent = e.message;
    });
  });
  return h("label.switch", null, box, ` ${label}`);
}

/** "Notify me when …": one switch per class (off = muted in every session). */
export function mutesPanel(): HTMLElement {
  const note = h("div.muted", { id: "notify-mutes-note" });
  const list = h("div.switches", { id: "notify-mutes" });
  void call<NotifyMutes>("GET", "mutes")
    .then((m) =>
      list.replaceChildren(
        ...classSwitches(m ?? { classes: [] }).map((c) => muteSwitch(`mute-${c.class}`, c.label, `classes/${c.class}`, c.on, note)),
      ),
    )
    .catch((e: Error) => (note.textContent = e.message));
  return h("details.notify-mutes", null, h("summary", null, "Notify me when…"), list, note);
}

/** The session's "Notify me" switch (off = the session is muted for me). */
export function sessionMuteSwitch(session: string): HTMLElement {
  const note = h("span.muted", { id: "session-mute-note" });
  const slot = h("span", { id: "session-mute" });
  void call<NotifyMutes>("GET", "mutes")
    .then((m) => {
      const on = !(m?.sessions ?? []).includes(session);
      slot.replaceChildren(muteSwitch("session-notify", "Notify", `sessions/${encodeURIComponent(session)}`, on, note), note);
    })
    .catch(() => {});
  return slot;
}

/** The quiet hours to save from the two time inputs, or why not. */
export function quietHoursFrom(start: string, end: string, timeZone: string): QuietHours | string {
  if (!/^\d\d:\d\d$/.test(start) || !/^\d\d:\d\d$/.test(end)) return "Give a start and an end time.";
  if (start === end) return "Start and end are the same time.";
  return { start, end, time_zone: timeZone };
}

/** "Quiet hours": every day from start to end, in this browser's time zone, notifications
 * still arrive but without sound or vibration. */
export function quietPanel(): HTMLElement {
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const on = h("input", { type: "checkbox", id: "quiet-on" }) as HTMLInputElement;
  const start = h("input", { type: "time", id: "quiet-start", value: "22:00" }) as HTMLInputElement;
  const end = h("input", { type: "time", id: "quiet-end", value: "07:00" }) as HTMLInputElement;
  const note = h("div.muted", { id: "quiet-note" });
  const shown = (q: QuietHours | null) => {
    on.checked = !!q;
    if (q) [start.value, end.value] = [q.start, q.end];
    note.textContent = q
      ? `Silent every day ${q.start}–${q.end} (${q.time_zone}): notifications still arrive.`
      : "Off: notifications make their sound at any hour.";
  };
  // Saves go out one at a time, in the order they were made, so a slow earlier request can
  // never land after a later one and undo it; the answer to the load is dropped once the user
  // has changed anything.
  let queue: Promise<unknown> = Promise.resolve();
  let touched = false;
  const send = (request: () => Promise<QuietHours | null>) => {
    queue = queue
      .then(request)
      .then((saved) => shown(saved))
      .catch((e: Error) => (note.textContent = e.message));
  };
  const save = (changed: HTMLInputElement) => {
    touched = true;
    if (!on.checked) {
      // moving a time while the switch is off stores nothing
      if (changed === on) send(() => call("DELETE", "quiet-hours").then(() => null));
      return;
    }
    const q = quietHoursFrom(start.value, end.value, zone);
    if (typeof q === "string") {
      note.textContent = q;
      return;
    }
    send(() => call<QuietHours>("PUT", "quiet-hours", q));
  };
  for (const input of [on, start, end]) input.addEventListener("change", () => save(input));
  const panel = h(
    "details.notify-quiet",
    null,
    h("summary", null, "Quiet hours"),
    h("label.switch", null, on, " Silent from "),
    start,
    " to ",
    end,
    note,
  );
  fetch("/api/v1/notify/quiet-hours", { credentials: "same-origin", headers: authHeaders() })
    .then(async (res) => {
      if (!res.ok && res.status !== 404) throw new Error(`GET quiet-hours: ${res.status}`);
      const q = res.status === 404 ? null : ((await res.json()) as QuietHours);
      if (!touched) shown(q);
    })
    .catch((e: Error) => (note.textContent = e.message))
    .finally(() => (panel.dataset.loaded = "true"));
  return panel;
}
