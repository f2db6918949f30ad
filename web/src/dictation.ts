// Dictation into the composer where the browser offers speech recognition (the Web Speech API,
// `SpeechRecognition` or Chrome's and Safari's `webkitSpeechRecognition`): a microphone button,
// shown only then. What is recognised is inserted at the caret as text to edit and send; nothing
// is sent by itself.

/** The part of a SpeechRecognition this uses. */
export interface Recognition {
  lang: string;
  continuous: boolean;
  interimResults: boolean;
  onresult: ((e: RecognitionEvent) => void) | null;
  onerror: ((e: { error: string }) => void) | null;
  onend: (() => void) | null;
  start(): void;
  stop(): void;
}

/** The part of a SpeechRecognitionEvent this uses. */
export interface RecognitionEvent {
  resultIndex: number;
  results: ArrayLike<{ isFinal: boolean; 0: { transcript: string } }>;
}

export type RecognitionCtor = new () => Recognition;

/** The browser's speech recognition, or null where it has none (the button is not shown). */
export function recognitionCtor(w: object = globalThis): RecognitionCtor | null {
  const g = w as { SpeechRecognition?: RecognitionCtor; webkitSpeechRecognition?: RecognitionCtor };
  return g.SpeechRecognition ?? g.webkitSpeechRecognition ?? null;
}

/** `text` put in place of value[start, end), spaced from its neighbours; the new caret after it. */
export function insertAt(value: string, start: number, end: number, text: string): { value: string; caret: number } {
  const t = text.trim();
  if (!t) return { value, caret: end };
  const before = value.slice(0, start);
  const after = value.slice(end);
  const lead = before && !/\s$/.test(before) ? " " : "";
  const trail = after && !/^\s/.test(after) ? " " : "";
  const put = lead + t + trail;
  return { value: before + put + after, caret: before.length + lead.length + t.length };
}

/** Where the text goes: a textarea, or anything shaped like one. */
export interface TextTarget {
  value: string;
  selectionStart: number | null;
  selectionEnd: number | null;
  setSelectionRange(start: number, end: number): void;
}

export type DictationState = "idle" | "listening" | { error: string };

/** One microphone: start, stop, and every final result inserted at the target's caret. */
export class Dictation {
  private rec: Recognition | null = null;
  state: DictationState = "idle";
  onState: ((s: DictationState) => void) | null = null;

  constructor(
    private readonly Ctor: RecognitionCtor,
    private readonly target: TextTarget,
    private readonly lang: string = typeof navigator === "undefined" ? "en" : navigator.language,
  ) {}

  get listening(): boolean {
    return this.state === "listening";
  }

  toggle(): void {
    if (this.rec) this.stop();
    else this.start();
  }

  start(): void {
    if (this.rec) return;
    const rec = new this.Ctor();
    rec.lang = this.lang;
    rec.continuous = true;
    rec.interimResults = false;
    rec.onresult = (e) => {
      for (let i = e.resultIndex; i < e.results.length; i++) {
        const r = e.results[i];
        if (r.isFinal) this.insert(r[0].transcript);
      }
    };
    rec.onerror = (e) => this.set({ error: e.error === "not-allowed" ? "the microphone is blocked for this site" : `dictation stopped: ${e.error}` });
    rec.onend = () => {
      if (this.rec !== rec) return;
      this.rec = null;
      if (this.state === "listening") this.set("idle");
    };
    this.rec = rec;
    this.set("listening");
    try {
      rec.start();
    } catch (e) {
      this.rec = null;
      this.set({ error: `dictation could not start: ${(e as Error).message}` });
    }
  }

  stop(): void {
    const rec = this.rec;
    this.rec = null;
    this.set("idle");
    rec?.stop();
  }

  private insert(text: string): void {
    const t = this.target;
    const start = t.selectionStart ?? t.value.length;
    const end = t.selectionEnd ?? start;
    const next = insertAt(t.value, start, end, text);
    t.value = next.value;
    t.setSelectionRange(next.caret, next.caret);
  }

  private set(s: DictationState): void {
    this.state = s;
    this.onState?.(s);
  }
}
