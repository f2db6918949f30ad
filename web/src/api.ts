// The authenticated HTTP API of moord, typed with the generated protocol types. A browser that
// logged in holds HttpOnly cookies (set by login and refresh; same-origin fetches send them); the
// bootstrap admin token in a link (`#token=…`) is taken from the URL fragment into localStorage
// and sent as a bearer header, but only by a page with no session of its own and only if the
// server says it is the bootstrap token (see `adoptableToken`): a link can never log the browser
// into someone's account. On a 401 the page spends its refresh cookie once and retries; when
// that fails too it shows the login page and comes back afterwards.

import type { ActionAccepted } from "./protocol/ActionAccepted";
import type { MachineInfo } from "./protocol/MachineInfo";
import type { StartSession } from "./protocol/StartSession";
import type { RestoreCheckpoint } from "./protocol/RestoreCheckpoint";
import type { CheckpointChanges } from "./protocol/CheckpointChanges";
import type { CheckpointSummary } from "./protocol/CheckpointSummary";
import type { EntriesPage } from "./protocol/EntriesPage";
import type { ErrorBody } from "./protocol/ErrorBody";
import type { InputAccepted } from "./protocol/InputAccepted";
import type { InputRequest } from "./protocol/InputRequest";
import type { Me } from "./protocol/Me";
import type { RecoveryBrief } from "./protocol/RecoveryBrief";
import type { Role } from "./protocol/Role";
import type { SessionInfo } from "./protocol/SessionInfo";
import type { SessionMember } from "./protocol/SessionMember";
import type { SessionOffer } from "./protocol/SessionOffer";
import type { ShareLinkInfo } from "./protocol/ShareLinkInfo";

export type { Role, SessionMember, SessionOffer, ShareLinkInfo };

const TOKEN_KEY = "moor.token";
/** Where the login page returns to (kept per tab). */
const RETURN_KEY = "moor.return";

/** `POST /api/v1/share-links/preview`: what a live share link grants. */
export interface LinkPreview {
  session: string;
  name: string;
  role: Role;
  created_by: string;
}

/** Whether `role` may send input and decide permission requests. */
export function canControl(role: Role): boolean {
  return role !== "viewer";
}

/** An HTTP error with the server's error body when it sent one. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody | null,
    /** Seconds from `Retry-After`, on a 429. */
    readonly retryAfter: number | null = null,
  ) {
    super(body ? `${body.message} (${status})` : `HTTP ${status}`);
  }
  /** A 4xx other than 408/429: retrying the same request will not help. */
  get permanent(): boolean {
    return this.status >= 400 && this.status < 500 && this.status !== 408 && this.status !== 429;
  }
}

/** A `token=` parameter of a URL fragment, and the fragment without it (`#…`, or empty). */
export function splitFragmentToken(hash: string): { token: string | null; rest: string } {
  const keep: string[] = [];
  let found: string | null = null;
  for (const p of hash.replace(/^#/, "").split("&")) {
    if (p.startsWith("token=")) found = decodeURIComponent(p.slice("token=".length)).trim();
    else if (p) keep.push(p);
  }
  return { token: found || null, rest: keep.length ? `#${keep.join("&")}` : "" };
}

/**
 * Whether the page may adopt `candidate`, a token from a link: never when it already has a
 * session (a stored token, or cookies `/me` accepts), and only the bootstrap admin token, which
 * is no account. Anything else — above all an access token of some user's — would log the
 * browser into that account (login CSRF). `whoIs(null)` asks with the page's cookies alone,
 * `whoIs(t)` with `t` alone; each answers `null` when refused.
 */
export async function adoptableToken(
  candidate: string,
  stored: string,
  whoIs: (token: string | null) => Promise<Me | null>,
): Promise<boolean> {
  if (stored) return false;
  if ((await whoIs(null)) !== null) return false;
  return (await whoIs(candidate))?.bootstrap === true;
}

/** `GET /me` with `token` alone, or with the page's cookies alone when `null`. */
async function whoIs(token: string | null): Promise<Me | null> {
  try {
    const res = await fetch("/api/v1/me", {
      cache: "no-store",
      credentials: token === null ? "same-origin" : "omit",
      headers: token === null ? {} : { Authorization: `Bearer ${token}` },
    });
    return res.ok ? ((await res.json()) as Me) : null;
  } catch {
    return null;
  }
}

/**
 * Takes `token=` out of the URL fragment (`/#token=…`, or a session link `/#/s/<id>&token=…`;
 * the route is kept) and, if [`adoptableToken`] allows, into storage.
 */
export async function captureToken(): Promise<void> {
  const { token: found, rest } = splitFragmentToken(location.hash);
  if (found === null) return;
  history.replaceState(null, "", location.pathname + location.search + rest);
  if (found === token()) return;
  if (await adoptableToken(found, token(), whoIs)) localStorage.setItem(TOKEN_KEY, found);
}

export function token(): string {
  return localStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(t: string): void {
  localStorage.setItem(TOKEN_KEY, t.trim());
}

/** The Authorization header for a stored token; none when the page lives on cookies. */
export function authHeaders(): Record<string, string> {
  const t = token();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

async function errorOf(res: Response): Promise<ApiError> {
  let body: ErrorBody | null = null;
  try {
    body = (await res.json()) as ErrorBody;
  } catch {
    body = null;
  }
  const ra = Number(res.headers.get("Retry-After"));
  return new ApiError(res.status, body, res.headers.has("Retry-After") && Number.isFinite(ra) ? ra : null);
}

let refreshing: Promise<boolean> | null = null;

/**
 * Spends the refresh cookie for a new pair (new cookies). One at a time: every request that got
 * a 401 meanwhile waits for the same answer, since a refresh token presented twice revokes its
 * whole login.
 */
export function refresh(): Promise<boolean> {
  refreshing ??= (async () => {
    try {
      const res = await fetch("/api/v1/auth/refresh", { method: "POST", cache: "no-store", credentials: "same-origin" });
      return res.ok;
    } catch {
      return false;
    } finally {
      refreshing = null;
    }
  })();
  return refreshing;
}

/** The route to come back to after logging in (then forgotten). */
/** Where the login page will return to, without taking it. */
export function peekReturn(): string {
  return sessionStorage.getItem(RETURN_KEY) ?? "";
}

export function takeReturn(): string {
  const r = sessionStorage.getItem(RETURN_KEY);
  sessionStorage.removeItem(RETURN_KEY);
  return r && !r.startsWith("#/login") ? r : "#/";
}

/** Shows the login page, remembering where the user was. */
export function needLogin(): void {
  const here = location.hash || "#/";
  if (here.startsWith("#/login") || here.startsWith("#/setup")) return;
  sessionStorage.setItem(RETURN_KEY, here);
  location.hash = "#/login";
}

/**
 * `fetch` with the page's credentials: on a 401 a refused stored token is dropped, the refresh
 * cookie is spent once and the request is sent again; a second 401 opens the login page (unless
 * `quiet`) and is returned as it is.
 */
export async function authFetch(url: string, init: RequestInit = {}, quiet = false): Promise<Response> {
  const send = () => {
    const headers = new Headers(init.headers);
    for (const [k, v] of Object.entries(authHeaders())) headers.set(k, v);
    return fetch(url, { cache: "no-store", credentials: "same-origin", ...init, headers });
  };
  const res = await send();
  if (res.status !== 401) return res;
  // A refused bearer token would shadow the cookies: it is of no use any more.
  if (token()) localStorage.removeItem(TOKEN_KEY);
  if (await refresh()) {
    const again = await send();
    if (again.status !== 401) return again;
  }
  if (!quiet) needLogin();
  return res;
}

async function call<T>(path: string, init: RequestInit = {}, quiet = false): Promise<T> {
  const headers = new Headers(init.headers);
  if (init.body) headers.set("Content-Type", "application/json");
  const res = await authFetch(`/api/v1${path}`, { ...init, headers }, quiet);
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** A request that needs no credentials (login, setup). */
async function open<T>(path: string, body?: unknown, method = body === undefined ? "GET" : "POST"): Promise<T> {
  const res = await fetch(`/api/v1${path}`, {
    method,
    cache: "no-store",
    credentials: "same-origin",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

const enc = encodeURIComponent;

/** A share link as created (its secret is in `token` and `url`, shown once). */
export interface ShareLink {
  id: string;
  token: string;
  url: string;
  role: Role;
  expires_at: number;
  uses: number;
}

export const api = {
  me: (quiet = false) => call<Me>("/me", {}, quiet),
  sessions: () => call<SessionInfo[]>("/sessions"),
  session: (id: string) => call<SessionInfo>(`/sessions/${enc(id)}`),
  entriesBefore: (id: string, before: number, limit: number) =>
    call<EntriesPage>(`/sessions/${enc(id)}/entries?before=${before}&limit=${limit}`),
  entriesAfter: (id: string, after: number, limit: number) =>
    call<EntriesPage>(`/sessions/${enc(id)}/entries?after=${after}&limit=${limit}`),
  postInput: (id: string, req: InputRequest) =>
    call<InputAccepted>(`/sessions/${enc(id)}/inputs`, { method: "POST", body: JSON.stringify(req) }),
  /** The session's uploaded checkpoints, newest first. */
  checkpoints: (id: string) => call<CheckpointSummary[]>(`/sessions/${enc(id)}/checkpoints`),
  /** A checkpoint's patch against its base commit (`git diff --binary` text). Checkpoint ids
   * are unique only within their session, so the session is always named. */
  async checkpointPatch(session: string, checkpoint: string): Promise<string> {
    const res = await authFetch(`/api/v1/checkpoints/${enc(checkpoint)}/diff?session=${enc(session)}`);
    if (!res.ok) throw await errorOf(res);
    return res.text();
  },
  /**
   * The files that changed from checkpoint `q.from` (the base commit without it) to `to`, each
   * with (a page of) its unified diff; `q.file` and `q.offset` page one file's diff, `q.summary`
   * leaves the diff text out.
   */
  checkpointChanges: (session: string, to: string, q: { from?: string | null; file?: string; offset?: number; summary?: boolean } = {}) => {
    const p = new URLSearchParams();
    if (q.from) p.set("from", q.from);
    if (q.file !== undefined) p.set("file", q.file);
    if (q.offset) p.set("offset", String(q.offset));
    if (q.summary) p.set("summary", "true");
    const qs = p.toString();
    return call<CheckpointChanges>(`/sessions/${enc(session)}/checkpoints/${enc(to)}/changes${qs ? `?${qs}` : ""}`);
  },
  recovery: (id: string) => call<RecoveryBrief>(`/sessions/${enc(id)}/recovery`),
  /** The session's whole log as a file: `jsonl` (every entry) or `markdown` (the transcript). */
  async exportSession(id: string, format: "jsonl" | "markdown"): Promise<Blob> {
    const res = await authFetch(`/api/v1/sessions/${enc(id)}/export?format=${format}`);
    if (!res.ok) throw await errorOf(res);
    return res.blob();
  },

  login: (name: string, password: string) => open<unknown>("/auth/login", { name, password }),
  logout: () => call<void>("/auth/logout", { method: "POST" }, true),
  /** `{open}`; 410 once the first admin exists. */
  setupStatus: () => open<{ open: boolean }>("/auth/setup"),
  setup: (code: string, name: string, password: string) => open<unknown>("/auth/setup", { code, name, password }),
  approveDevice: (userCode: string) =>
    call<void>("/auth/device/approve", { method: "POST", body: JSON.stringify({ user_code: userCode }) }),
  denyDevice: (userCode: string) =>
    call<void>("/auth/device/deny", { method: "POST", body: JSON.stringify({ user_code: userCode }) }),
  createShareLink: (id: string, role: Role, expiresIn: number, uses: number) =>
    call<ShareLink>(`/sessions/${enc(id)}/share-links`, {
      method: "POST",
      body: JSON.stringify({ role, expires_in: expiresIn, uses }),
    }),
  revokeShareLink: (linkId: string) => call<void>(`/share-links/${enc(linkId)}`, { method: "DELETE" }),
  /** What a share link grants (its session's name, the role, its maker), asked with no login. */
  previewShareLink: (link: string) =>
    call<LinkPreview>("/share-links/preview", { method: "POST", body: JSON.stringify({ token: link }) }, true),
  redeemShareLink: (link: string) =>
    call<{ session: string; role: Role }>("/share-links/redeem", { method: "POST", body: JSON.stringify({ token: link }) }),
  /** Changes a member's role (`undefined`: done), or offers the role to someone who is not a
   * member (`{status: "offered"}`: theirs once they accept; said whether or not the name is an
   * account's). An administrator's is direct. */
  putMember: (id: string, user: string, role: Role) =>
    call<{ status: "offered" } | undefined>(`/sessions/${enc(id)}/members/${enc(user)}`, { method: "PUT", body: JSON.stringify({ role }) }),
  /** The roles offered to the caller, newest first (their sessions are not in `sessions()` yet). */
  offers: () => call<SessionOffer[]>("/offers"),
  /** Accepts an offer: the session joins the caller's list with the offered role. */
  acceptOffer: (session: string) => call<{ session: string; role: Role }>(`/offers/${enc(session)}/accept`, { method: "POST" }),
  /** Declines an offer. */
  declineOffer: (session: string) => call<void>(`/offers/${enc(session)}`, { method: "DELETE" }),
  removeMember: (id: string, user: string) => call<void>(`/sessions/${enc(id)}/members/${enc(user)}`, { method: "DELETE" }),
  /** Everyone with a role on the session, and the pending offers of one (owners only). */
  members: (id: string) => call<SessionMember[]>(`/sessions/${enc(id)}/members`),
  /** The session's share links, live or not, newest first, without their secrets (owners only). */
  shareLinks: (id: string) => call<ShareLinkInfo[]>(`/sessions/${enc(id)}/share-links`),
  /** The caller's machines (`moor host`). */
  machines: () => call<MachineInfo[]>("/machines"),
  /** One machine with its newest sessions. */
  machine: (id: string) => call<MachineInfo>(`/machines/${enc(id)}`),
  /** Asks a machine to start a session: names only, never a command or a path. */
  startOnMachine: (id: string, req: StartSession) =>
    call<ActionAccepted>(`/machines/${enc(id)}/sessions`, { method: "POST", body: JSON.stringify(req) }),
  /** Asks a machine to put one of a session's checkpoints on a new branch of its project. */
  restoreOnMachine: (id: string, session: string, req: RestoreCheckpoint) =>
    call<ActionAccepted>(`/machines/${enc(id)}/sessions/${enc(session)}/restore`, { method: "POST", body: JSON.stringify(req) }),
  /** Asks a machine to stop or resume one of its sessions. */
  machineAction: (id: string, session: string, action: "stop" | "resume", key: string) =>
    call<ActionAccepted>(`/machines/${enc(id)}/sessions/${enc(session)}/${action}`, {
      method: "POST",
      body: JSON.stringify({ idempotency_key: key }),
    }),
};

/** Server hints for the client (no secrets): the keep-alive interval the watchdog relies on. */
export interface AppConfig {
  keepalive_ms: number;
  version: string;
}

export async function appConfig(): Promise<AppConfig> {
  try {
    const res = await fetch("/app-config.json", { cache: "no-store" });
    if (res.ok) return (await res.json()) as AppConfig;
  } catch {
    // Offline or an older server: assume the default.
  }
  return { keepalive_ms: 15000, version: "?" };
}

/** A user-facing sentence for a failed call. */
export function explain(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 429) return `Too many attempts: try again in ${e.retryAfter ?? "a few"} s.`;
    return e.body?.message ?? `The server answered ${e.status}.`;
  }
  if (e instanceof TypeError) return "The server is unreachable.";
  return (e as Error).message ?? String(e);
}
