// The authenticated HTTP API of moord, typed with the generated protocol types. The token comes
// once from the URL fragment (`#token=…`, as moord prints it) and is kept in localStorage.

import type { CheckpointSummary } from "./protocol/CheckpointSummary";
import type { EntriesPage } from "./protocol/EntriesPage";
import type { ErrorBody } from "./protocol/ErrorBody";
import type { InputAccepted } from "./protocol/InputAccepted";
import type { InputRequest } from "./protocol/InputRequest";
import type { RecoveryBrief } from "./protocol/RecoveryBrief";
import type { SessionInfo } from "./protocol/SessionInfo";

const TOKEN_KEY = "moor.token";

/** What a caller may do. Roles arrive with accounts; until then every token is an admin. */
export type Role = "owner" | "controller" | "viewer" | "admin";

/** Whether `role` may send input and decide permission requests. */
export function canControl(role: Role): boolean {
  return role !== "viewer";
}

/** An HTTP error with the server's error body when it sent one. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: ErrorBody | null,
  ) {
    super(body ? `${body.message} (${status})` : `HTTP ${status}`);
  }
  /** A 4xx other than 408/429: retrying the same request will not help. */
  get permanent(): boolean {
    return this.status >= 400 && this.status < 500 && this.status !== 408 && this.status !== 429;
  }
}

/**
 * Takes `token=` out of the URL fragment into storage. moord prints `/#token=…`; share links are
 * `/#/s/<id>&token=…`. The rest of the fragment (the route) is kept.
 */
export function captureToken(): void {
  const parts = location.hash.slice(1).split("&");
  const keep: string[] = [];
  let found: string | null = null;
  for (const p of parts) {
    if (p.startsWith("token=")) found = decodeURIComponent(p.slice("token=".length));
    else if (p) keep.push(p);
  }
  if (found) {
    localStorage.setItem(TOKEN_KEY, found);
    history.replaceState(null, "", location.pathname + location.search + (keep.length ? `#${keep.join("&")}` : ""));
  }
}

export function token(): string {
  return localStorage.getItem(TOKEN_KEY) ?? "";
}

export function setToken(t: string): void {
  localStorage.setItem(TOKEN_KEY, t.trim());
}

async function call<T>(path: string, init: RequestInit = {}): Promise<T> {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${token()}`);
  if (init.body) headers.set("Content-Type", "application/json");
  const res = await fetch(`/api/v1${path}`, { ...init, headers, cache: "no-store" });
  if (!res.ok) {
    let body: ErrorBody | null = null;
    try {
      body = (await res.json()) as ErrorBody;
    } catch {
      body = null;
    }
    throw new ApiError(res.status, body);
  }
  return (await res.json()) as T;
}

const enc = encodeURIComponent;

export const api = {
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
  /** A checkpoint's patch against its base commit (`git diff --binary` text). */
  async checkpointPatch(checkpoint: string): Promise<string> {
    const res = await fetch(`/api/v1/checkpoints/${enc(checkpoint)}/diff`, {
      headers: { Authorization: `Bearer ${token()}` },
      cache: "no-store",
    });
    if (!res.ok) {
      let body: ErrorBody | null = null;
      try {
        body = (await res.json()) as ErrorBody;
      } catch {
        body = null;
      }
      throw new ApiError(res.status, body);
    }
    return res.text();
  },
  recovery: (id: string) => call<RecoveryBrief>(`/sessions/${enc(id)}/recovery`),
  /** The caller's identity and role; servers without accounts answer 404, meaning admin. */
  async role(): Promise<Role> {
    try {
      const me = await call<{ role?: Role }>("/me");
      return me.role ?? "admin";
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return "admin";
      throw e;
    }
  },
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
