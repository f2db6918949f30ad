// A tiny view layer: element construction and text helpers. No framework, no virtual DOM; views
// keep references to the elements they update.

type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;
type Child = Node | string | number | null | undefined | false;

/** Creates an element: `h("div.card", {onclick}, "text", child)`. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K | `${K}.${string}`,
  attrs?: Attrs | null,
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const [name, ...classes] = tag.split(".");
  const el = document.createElement(name as K);
  if (classes.length) el.className = classes.join(" ");
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") {
        el.addEventListener(k.slice(2), v as EventListener);
      } else if (k === "class") {
        el.className = [el.className, String(v)].filter(Boolean).join(" ");
      } else if (v === true) {
        el.setAttribute(k, "");
      } else {
        el.setAttribute(k, String(v));
      }
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** `document.getElementById`, typed and checked. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const el = document.getElementById(id);
  if (!el) throw new Error(`#${id} missing`);
  return el as T;
}

/** "12:03:04" today, "3 Jan 12:03" otherwise. */
export function clock(ms: number | null | undefined): string {
  if (!ms) return "never";
  const d = new Date(ms);
  const now = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (d.toDateString() === now.toDateString()) return time;
  return `${d.toLocaleDateString([], { day: "numeric", month: "short" })} ${time}`;
}

/** "5 s ago", "3 min ago", "2 h ago", "4 d ago". */
export function ago(ms: number | null | undefined, now = Date.now()): string {
  if (!ms) return "never";
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

/** Random hex id; works in insecure contexts (a phone on http://LAN) unlike randomUUID. */
export function randomId(bytes = 16): string {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

const THEME_KEY = "moor.theme";

/** Applies the stored theme: auto (the system's), light or dark. */
export function applyTheme(): void {
  const t = localStorage.getItem(THEME_KEY) ?? "auto";
  if (t === "auto") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
}

/** A header button cycling auto → light → dark. */
export function themeButton(): HTMLElement {
  return h(
    "button.icon",
    {
      type: "button",
      title: "Theme: auto, light, dark",
      "aria-label": "Theme",
      onclick: () => {
        const order = ["auto", "light", "dark"];
        const cur = localStorage.getItem(THEME_KEY) ?? "auto";
        localStorage.setItem(THEME_KEY, order[(order.indexOf(cur) + 1) % order.length]);
        applyTheme();
      },
    },
    "◐",
  );
}
