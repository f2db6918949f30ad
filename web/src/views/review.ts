// The review on the phone: the files a turn (or the whole session) changed, each collapsed
// until tapped, with its unified diff coloured and lightly syntax-highlighted, large diffs paged
// with "more", binary files named. The diffs come from the server's checkpoints
// (`GET /sessions/{id}/checkpoints/{to}/changes?from=`); which two checkpoints bound a turn is
// read from the log (`turnsOf`).
//
// The turn rule: a turn starts at its prompt (`input.text`). Its start is the last
// `checkpoint.created` before the prompt (none in the whole log: the base commit). Its end is
// the last `checkpoint.created` before the next prompt: `moor` takes the checkpoint of a tool
// call after the tool's result is durable, so the checkpoint of a turn's last edit usually
// lands after its `agent.result`, still before the next prompt. A turn with no checkpoint after
// its prompt changed nothing `moor` saw.

import { api, ApiError } from "../api";
import { h } from "../dom";
import { payloadOf } from "../entries";
import type { CheckpointChanges } from "../protocol/CheckpointChanges";
import type { Entry } from "../protocol/Entry";
import type { FileDiff } from "../protocol/FileDiff";
import type { SessionState } from "../protocol/SessionState";
import { sheet } from "./sheets";

/** One turn and the checkpoints that bound it. */
export interface Turn {
  /** Seq of the prompt that started it. */
  start: number;
  /** Seq of its first `agent.result`, if the agent wrote one. */
  result: number | null;
  /** The checkpoint at its start: an id; null: the base commit; undefined: not in the entries held. */
  from: string | null | undefined;
  /** The checkpoint at its end; null: none was taken after its prompt. */
  to: string | null;
}

/**
 * The turns of `entries` (in log order) with their bounding checkpoints. `fromLogStart`: the
 * entries begin at the log's first, so a turn with no checkpoint before it starts at the base.
 */
export function turnsOf(entries: Entry[], fromLogStart: boolean): Turn[] {
  let last: string | null | undefined = fromLogStart ? null : undefined;
  const turns: Turn[] = [];
  let cur: Turn | null = null;
  for (const e of entries) {
    if (e.kind === "checkpoint.created") {
      const id = payloadOf(e, "checkpoint.created")?.id;
      if (typeof id !== "string") continue;
      last = id;
      if (cur) cur.to = id;
    } else if (e.kind === "input.text") {
      cur = { start: e.seq, result: null, from: last, to: null };
      turns.push(cur);
    } else if (e.kind === "agent.result" && cur && cur.result === null) {
      cur.result = e.seq;
    }
  }
  return turns;
}

/** The turn whose prompt or result is the entry `seq`, if it changed anything. */
export function turnAt(turns: Turn[], seq: number): Turn | null {
  const t = turns.find((x) => x.start === seq || x.result === seq);
  return t && t.to !== null && t.to !== t.from ? t : null;
}

export type LineClass = "hunk" | "add" | "del" | "ctx" | "note";

/** What a line of a unified diff's hunks is. */
export function classify(line: string): LineClass {
  if (line.startsWith("@@")) return "hunk";
  if (line.startsWith("+")) return "add";
  if (line.startsWith("-")) return "del";
  if (line.startsWith("\\")) return "note";
  return "ctx";
}

export type Lang = "c" | "hash" | "plain";

const C_LIKE = new Set(["c", "h", "cc", "cpp", "hpp", "cs", "go", "java", "js", "jsx", "mjs", "cjs", "ts", "tsx", "rs", "kt", "swift", "scala", "dart", "php", "css", "scss", "json", "proto", "zig"]);
const HASH = new Set(["py", "rb", "sh", "bash", "zsh", "fish", "pl", "yaml", "yml", "toml", "r", "ex", "exs", "nix", "conf", "ini", "tf", "mk"]);

/** The tokenizer for a path, by its extension (Makefile and Dockerfile by name). */
export function langOf(path: string): Lang {
  const name = path.slice(path.lastIndexOf("/") + 1);
  if (/^(Makefile|Dockerfile|\.?[a-z]*rc)$/.test(name)) return "hash";
  const dot = name.lastIndexOf(".");
  const ext = dot > 0 ? name.slice(dot + 1).toLowerCase() : "";
  if (C_LIKE.has(ext)) return "c";
  if (HASH.has(ext)) return "hash";
  return "plain";
}

const KEYWORDS = new Set(
  (
    "fn let mut const var function return if else for while loop match struct enum impl trait pub use mod crate " +
    "class interface type import export from as async await new this self Self super true false null undefined " +
    "None True False nil def elif end do then fi done case esac in of is not and or break continue yield static " +
    "void int char bool float double long unsigned package func go defer chan map select switch default try catch " +
    "finally throw throws extends implements where dyn ref move unsafe extern lambda with pass raise except"
  ).split(" "),
);

export type TokenKind = "kw" | "str" | "com" | "num" | "txt";
export interface Token {
  k: TokenKind;
  s: string;
}

/**
 * A line of code as tokens (keywords, strings, comments, numbers, the rest): a small,
 * line-at-a-time tokenizer, enough to read a diff on a phone. A block comment or string that
 * spans lines is seen only on its first line.
 */
export function tokenize(code: string, lang: Lang): Token[] {
  if (lang === "plain") return code ? [{ k: "txt", s: code }] : [];
  const out: Token[] = [];
  const push = (k: TokenKind, s: string) => {
    const prev = out[out.length - 1];
    if (prev && prev.k === k && k === "txt") prev.s += s;
    else out.push({ k, s });
  };
  let i = 0;
  while (i < code.length) {
    const c = code[i];
    const rest = code.slice(i);
    if ((lang === "c" && rest.startsWith("//")) || (lang === "hash" && c === "#")) {
      push("com", rest);
      break;
    }
    if (lang === "c" && rest.startsWith("/*")) {
      const end = code.indexOf("*/", i + 2);
      const j = end < 0 ? code.length : end + 2;
      push("com", code.slice(i, j));
      i = j;
      continue;
    }
    if (c === '"' || c === "'" || c === "`") {
      let j = i + 1;
      while (j < code.length && code[j] !== c) j += code[j] === "\\" ? 2 : 1;
      j = Math.min(j + 1, code.length);
      push("str", code.slice(i, j));
      i = j;
      continue;
    }
    const word = /^[A-Za-z_$][\w$]*/.exec(rest);
    if (word) {
      push(KEYWORDS.has(word[0]) ? "kw" : "txt", word[0]);
      i += word[0].length;
      continue;
    }
    const num = /^\d[\w.]*/.exec(rest);
    if (num) {
      push("num", num[0]);
      i += num[0].length;
      continue;
    }
    push("txt", c);
    i += 1;
  }
  return out;
}

/** Bytes of `s` in UTF-8 (the server pages diffs by bytes). */
export function utf8Bytes(s: string): number {
  return new TextEncoder().encode(s).length;
}

/** One diff line, coloured by its class, its code highlighted. */
function lineView(line: string, lang: Lang): HTMLElement {
  const cls = classify(line);
  if (cls === "hunk" || cls === "note") return h(`span.${cls}`, null, `${line}\n`);
  const sign = line.slice(0, 1) || " ";
  return h(
    `span.${cls}`,
    null,
    h("i.sign", null, sign),
    tokenize(line.slice(1), lang).map((t) => (t.k === "txt" ? t.s : h(`b.tk-${t.k}`, null, t.s))),
    "\n",
  );
}

const STATUS_MARK: Record<string, string> = { added: "A", modified: "M", deleted: "D", renamed: "R", type_changed: "T" };

/** One file: a row to tap, and its diff (paged with "more") once opened. */
function fileView(session: string, to: string, from: string | null, f: FileDiff): HTMLElement {
  const lang = langOf(f.path);
  const body = h("div.review-body", { hidden: true });
  const pre = h("pre.diff.review-diff");
  let shown = f.offset + utf8Bytes(f.diff);
  let more: HTMLElement | null = null;
  const append = (text: string) => {
    for (const l of text.split("\n")) if (l) pre.append(lineView(l, lang));
  };
  if (f.binary) {
    body.append(h("p.muted.review-binary", null, "binary file, not shown"));
  } else if (f.note && !f.truncated) {
    body.append(h("p.muted.review-note", null, f.note));
  } else {
    // A file left out of a large answer (a note, or no text yet) is had alone with "more".
    if (f.note) body.append(h("p.muted.review-note", null, f.note));
    append(f.diff);
    body.append(pre);
    if (f.truncated) {
      const status = h("span.muted");
      more = h(
        "button.tb.review-more",
        {
          type: "button",
          onclick: async () => {
            more?.setAttribute("disabled", "");
            status.textContent = " loading…";
            try {
              const page = await api.checkpointChanges(session, to, { from, file: f.path, offset: shown });
              const next = page.files[0];
              if (!next) throw new Error("the file is no longer listed");
              append(next.diff);
              shown = next.offset + utf8Bytes(next.diff);
              status.textContent = next.truncated ? ` ${Math.round((shown * 100) / Math.max(1, next.diff_bytes))}% shown` : "";
              if (next.truncated) more?.removeAttribute("disabled");
              else more?.remove();
            } catch (e) {
              more?.removeAttribute("disabled");
              status.textContent = ` could not load more: ${(e as Error).message}`;
            }
          },
        },
        "more",
      );
      body.append(h("div.actions", null, more, status));
    }
  }
  const counts = f.binary ? h("span.muted", null, "binary") : h("span", null, h("span.ok", null, `+${f.insertions}`), " ", h("span.bad", null, `−${f.deletions}`));
  const head = h(
    "button.review-file-head",
    {
      type: "button",
      "aria-expanded": "false",
      onclick: () => {
        body.hidden = !body.hidden;
        head.setAttribute("aria-expanded", String(!body.hidden));
      },
    },
    h("code.review-mark", null, STATUS_MARK[f.status] ?? "?"),
    h("span.ell.review-path", null, f.old_path ? `${f.old_path} → ${f.path}` : f.path),
    counts,
  );
  return h("div.review-file", { "data-path": f.path, "data-status": f.status, "data-binary": String(f.binary) }, head, body);
}

/** "3 files changed" (or "1 file changed"). */
export function filesText(n: number): string {
  return `${n} ${n === 1 ? "file" : "files"} changed`;
}

/** The review of the changes from `from` (null: the base commit) to checkpoint `to`. */
export async function reviewPanel(session: string, to: string, from: string | null): Promise<HTMLElement> {
  let c: CheckpointChanges;
  try {
    c = await api.checkpointChanges(session, to, { from });
  } catch (e) {
    const why = e instanceof ApiError && e.status === 404 ? "This server does not hold these checkpoints' contents (yet): they are uploaded after they are taken." : `Could not load the changes: ${(e as Error).message}`;
    return h("p.muted.review-error", null, why);
  }
  const head = h(
    "p.review-summary",
    null,
    h("b", null, filesText(Number(c.files_total))),
    " ",
    h("span.ok", null, `+${c.insertions}`),
    " ",
    h("span.bad", null, `−${c.deletions}`),
    c.from ? h("span.muted", null, ` · since checkpoint ${c.from.slice(0, 8)}`) : h("span.muted", null, " · since the base commit"),
  );
  return h(
    "div.panel.review",
    { "data-to": c.to, "data-from": c.from ?? "" },
    head,
    c.note ? h("p.muted.review-note", null, c.note) : null,
    c.files.length ? c.files.map((f) => fileView(session, c.to, c.from, f)) : h("p.muted", null, "No files changed."),
    c.files.length < Number(c.files_total) ? h("p.muted", null, `… and ${Number(c.files_total) - c.files.length} more files`) : null,
  );
}

/** Opens the review in a sheet. */
export async function openReview(session: string, to: string, from: string | null, title: string): Promise<void> {
  const s = sheet(title);
  s.body.append(h("p.muted", null, "Loading the changes…"));
  const panel = await reviewPanel(session, to, from);
  s.body.replaceChildren(panel);
}

/** Pages of older entries read to find a turn's starting checkpoint, at most. */
const FIND_PAGES = 25;

/**
 * The last checkpoint before entry `before`, read from the server's log (null: none, the
 * base commit), for a turn whose start the page does not hold.
 */
export async function checkpointBefore(session: string, before: number): Promise<string | null> {
  let cursor = before;
  for (let i = 0; i < FIND_PAGES && cursor > 1; i++) {
    const page = await api.entriesBefore(session, cursor, 200);
    for (let j = page.entries.length - 1; j >= 0; j--) {
      const id = payloadOf(page.entries[j], "checkpoint.created")?.id;
      if (typeof id === "string") return id;
    }
    if (!page.has_more || !page.entries.length) return null;
    cursor = page.entries[0].seq;
  }
  return null;
}

/** Changed-file counts the server gave, by "from..to". */
const counts = new Map<string, number>();
/** Counts being asked for, and the newest link drawn for each meanwhile. */
const asking = new Map<string, HTMLElement>();
/** A checkpoint is announced in the log before it is uploaded: ask again this long after a 404, doubling. */
const RECOUNT_MS = 1000;
const RECOUNT_MAX_MS = 32000;

/** Writes the count of `from..to` on `link`, asking the server once (again while it lacks the checkpoint). */
function count(session: string, from: string | null, to: string, link: HTMLElement): void {
  const key = `${from ?? ""}..${to}`;
  const known = counts.get(key);
  if (known !== undefined) {
    link.textContent = filesText(known);
    return;
  }
  const inFlight = asking.has(key);
  asking.set(key, link);
  if (inFlight) return;
  const ask = (delay: number) =>
    api.checkpointChanges(session, to, { from, summary: true }).then(
      (c) => {
        counts.set(key, Number(c.files_total));
        const l = asking.get(key);
        if (l) l.textContent = filesText(Number(c.files_total));
        asking.delete(key);
      },
      (e) => {
        if (e instanceof ApiError && e.status === 404 && delay <= RECOUNT_MAX_MS) setTimeout(() => void ask(delay * 2), delay);
        else asking.delete(key);
      },
    );
  void ask(RECOUNT_MS);
}

/**
 * The transcript's link to a turn's review, under its prompt and its result: "3 files
 * changed" once the server said how many (a summary, asked once per turn).
 */
export function turnLink(session: string, t: Turn): HTMLElement {
  const link = h("button.link.review-link", { type: "button", "data-to": t.to ?? "" }, "Review changes");
  const to = t.to as string;
  link.addEventListener("click", async (e) => {
    e.stopPropagation();
    const from = t.from === undefined ? await checkpointBefore(session, t.start) : t.from;
    await openReview(session, to, from, "Changes of this turn");
  });
  if (t.from !== undefined) count(session, t.from, to, link);
  return h("div.review-turn", null, link);
}

/** The session header's "5 files changed": the base commit to the newest checkpoint. */
export function sessionChanges(session: string): { el: HTMLElement; update(s: SessionState | null): void } {
  let to: string | null = null;
  const el = h(
    "button.tb",
    { type: "button", id: "session-changes", hidden: true, onclick: () => to && void openReview(session, to, null, "Changes in this session") },
    "",
  );
  return {
    el,
    update(s) {
      const last = s?.last_checkpoint as { id?: unknown; diffstat?: { files?: unknown } } | null | undefined;
      if (!last || typeof last.id !== "string") return;
      to = last.id;
      el.textContent = filesText(Number(last.diffstat?.files ?? 0));
      el.hidden = false;
    },
  };
}
