// Log entries narrowed to the generated `EntryBody` union: a kind the protocol types comes with
// its payload's type, so a misspelt kind or field fails tsc. Kinds the protocol does not know
// (a newer moor) stay plain `Entry`s and are shown as they are, never dropped.

import type { Entry } from "./protocol/Entry";
import type { EntryBody } from "./protocol/EntryBody";
import { ENTRY_KINDS } from "./protocol/kinds";

/** Every kind with a payload type. */
export type Kind = EntryBody["kind"];
/** Each kind's payload type. */
type Payloads = { [B in EntryBody as B["kind"]]: B["payload"] };
/** The payload type of `K`. */
export type PayloadOf<K extends Kind> = Payloads[K];
/** An entry whose kind the protocol types: `kind` and `payload` narrow together. */
export type TypedEntry = Omit<Entry, "kind" | "payload"> & EntryBody;
/** The kinds a client may send (`POST /inputs`): inputs, not the receipts the server writes. */
export type InputKind = Exclude<Extract<Kind, `input.${string}`>, "input.delivered" | "input.applied" | "input.failed" | "input.uncertain">;

const KNOWN: ReadonlySet<string> = new Set(ENTRY_KINDS);

/** `e` narrowed to its typed body, or null for a kind nobody here knows or a payload that is not an object. */
export function typed(e: Entry): TypedEntry | null {
  if (!KNOWN.has(e.kind)) return null;
  if (!e.payload || typeof e.payload !== "object" || Array.isArray(e.payload)) return null;
  return e as unknown as TypedEntry;
}

/** The payload of `e` if it is of kind `kind`. */
export function payloadOf<K extends Kind>(e: Entry, kind: K): PayloadOf<K> | null {
  const t = typed(e);
  if (!t || t.kind !== kind) return null;
  return t.payload as unknown as PayloadOf<K>;
}
