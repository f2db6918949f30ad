// Input that is never lost: every message gets a client id and is written to IndexedDB before
// anything is sent, then posted (idempotently, by that id) until the server has it, across
// reconnects and reloads. A record is dropped only once the log holds its entry; from then on
// the log's receipts (delivered, applied) tell its fate.

import type { InputAccepted } from "./protocol/InputAccepted";
import type { InputRequest } from "./protocol/InputRequest";
import type { JsonValue } from "./protocol/serde_json/JsonValue";
import { randomId } from "./dom";
import type { InputKind, PayloadOf } from "./entries";

export interface OutboxRecord {
  client_msg_id: string;
  session: string;
  kind: InputKind;
  payload: JsonValue;
  created_at: number;
  /** The input's seq once the server stored it. */
  seq: number | null;
  /** The server stored it with no bridge connected: it waits in the log for the next one. */
  queued?: boolean;
  /** Why the server refused it for good (4xx); it will not be retried. */
  error: string | null;
  attempts: number;
}

/** Storage behind the outbox: IndexedDB, or memory where IndexedDB is unavailable. */
interface Store {
  all(): Promise<OutboxRecord[]>;
  put(r: OutboxRecord): Promise<void>;
  remove(id: string): Promise<void>;
}

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}

class IdbStore implements Store {
  constructor(private readonly db: IDBDatabase) {}

  static open(name = "moor"): Promise<IdbStore> {
    return new Promise((resolve, reject) => {
      const open = indexedDB.open(name, 1);
      open.onupgradeneeded = () => {
        const db = open.result;
        if (!db.objectStoreNames.contains("outbox")) {
          db.createObjectStore("outbox", { keyPath: "client_msg_id" });
        }
      };
      open.onsuccess = () => resolve(new IdbStore(open.result));
      open.onerror = () => reject(open.error);
      open.onblocked = () => reject(new Error("IndexedDB blocked"));
    });
  }

  private tx(mode: IDBTransactionMode): IDBObjectStore {
    return this.db.transaction("outbox", mode).objectStore("outbox");
  }

  all(): Promise<OutboxRecord[]> {
    return req(this.tx("readonly").getAll() as IDBRequest<OutboxRecord[]>);
  }

  put(r: OutboxRecord): Promise<void> {
    // Resolve on commit, not on request success: "kept" must mean durable.
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction("outbox", "readwrite");
      tx.objectStore("outbox").put(r);
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
  }

  async remove(id: string): Promise<void> {
    await req(this.tx("readwrite").delete(id));
  }
}

class MemoryStore implements Store {
  private m = new Map<string, OutboxRecord>();
  async all() {
    return [...this.m.values()];
  }
  async put(r: OutboxRecord) {
    this.m.set(r.client_msg_id, { ...r });
  }
  async remove(id: string) {
    this.m.delete(id);
  }
}

export type Poster = (session: string, req: InputRequest) => Promise<InputAccepted>;

export class Outbox {
  private records = new Map<string, OutboxRecord>();
  private listeners = new Set<() => void>();
  private pumping = false;
  private again = false;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private failures = 0;
  /** Whether the records are only in memory (IndexedDB unavailable). */
  volatile = false;

  private constructor(
    private readonly store: Store,
    private readonly post: Poster,
  ) {}

  static async open(post: Poster, dbName = "moor"): Promise<Outbox> {
    let store: Store;
    let volatile = false;
    try {
      store = await IdbStore.open(dbName);
    } catch {
      store = new MemoryStore();
      volatile = true;
    }
    const box = new Outbox(store, post);
    box.volatile = volatile;
    for (const r of await store.all()) box.records.set(r.client_msg_id, r);
    return box;
  }

  onChange(cb: () => void): () => void {
    this.listeners.add(cb);
    return () => this.listeners.delete(cb);
  }

  private changed(): void {
    for (const cb of this.listeners) cb();
  }

  /** Records of `session`, oldest first. */
  list(session: string): OutboxRecord[] {
    return [...this.records.values()]
      .filter((r) => r.session === session)
      .sort((a, b) => a.created_at - b.created_at || a.client_msg_id.localeCompare(b.client_msg_id));
  }

  /** Keeps the message durably, then starts sending it. */
  async send<K extends InputKind>(session: string, kind: K, payload: PayloadOf<K>): Promise<OutboxRecord> {
    const rec: OutboxRecord = {
      client_msg_id: `web-${randomId(12)}`,
      session,
      kind,
      // Payload types are JSON objects; optional fields are left out, never `undefined`.
      payload: payload as unknown as JsonValue,
      created_at: Date.now(),
      seq: null,
      error: null,
      attempts: 0,
    };
    await this.store.put(rec);
    this.records.set(rec.client_msg_id, rec);
    this.changed();
    this.pump();
    return rec;
  }

  /** The log of `session` holds everything up to `hi`: records stored at or below it are done. */
  async settle(session: string, hi: number): Promise<void> {
    const done = this.list(session).filter((r) => r.seq !== null && r.seq <= hi);
    if (!done.length) return;
    for (const r of done) {
      this.records.delete(r.client_msg_id);
      await this.store.remove(r.client_msg_id);
    }
    this.changed();
  }

  /** Forgets a refused record. */
  async discard(id: string): Promise<void> {
    this.records.delete(id);
    await this.store.remove(id);
    this.changed();
  }

  /** Sends every unsent record, oldest first, one at a time (so order is kept). */
  pump(): void {
    if (this.pumping) {
      this.again = true;
      return;
    }
    if (this.retryTimer) {
      clearTimeout(this.retryTimer);
      this.retryTimer = null;
    }
    this.pumping = true;
    void this.run().finally(() => {
      this.pumping = false;
      if (this.again) {
        this.again = false;
        this.pump();
      }
    });
  }

  private async run(): Promise<void> {
    const pending = () =>
      [...this.records.values()]
        .filter((r) => r.seq === null && r.error === null)
        .sort((a, b) => a.created_at - b.created_at);
    for (let r = pending()[0]; r; r = pending()[0]) {
      r.attempts += 1;
      try {
        const accepted = await this.post(r.session, {
          client_msg_id: r.client_msg_id,
          kind: r.kind,
          payload: r.payload,
        });
        r.seq = accepted.seq;
        r.queued = accepted.queued === true;
        this.failures = 0;
      } catch (e) {
        const status = (e as { status?: number }).status;
        if (status === 401) {
          // Logged out (the page is asking for a login): keep it; the next pump after the
          // login sends it.
          this.changed();
          return;
        }
        const permanent = status !== undefined && status >= 400 && status < 500 && status !== 408 && status !== 429;
        if (!permanent) {
          // Offline or the server is down: keep it and try again later.
          this.failures += 1;
          const ms = Math.min(10000, 500 * 2 ** Math.min(5, this.failures - 1));
          this.retryTimer = setTimeout(() => this.pump(), ms);
          this.changed();
          return;
        }
        r.error = e instanceof Error ? e.message : String(e);
      }
      await this.store.put(r);
      this.changed();
    }
  }
}
