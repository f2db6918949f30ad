import { describe, expect, it } from "vitest";
import { Dictation, insertAt, recognitionCtor, type Recognition, type RecognitionEvent } from "../src/dictation";

/** A recognition the test drives: it hears what `say` gives it. */
class FakeRecognition implements Recognition {
  static last: FakeRecognition | null = null;
  lang = "";
  continuous = false;
  interimResults = true;
  onresult: ((e: RecognitionEvent) => void) | null = null;
  onerror: ((e: { error: string }) => void) | null = null;
  onend: (() => void) | null = null;
  started = 0;
  stopped = 0;
  private heard: { isFinal: boolean; 0: { transcript: string } }[] = [];
  constructor() {
    FakeRecognition.last = this;
  }
  start() {
    this.started++;
  }
  stop() {
    this.stopped++;
    this.onend?.();
  }
  say(transcript: string, isFinal = true) {
    const at = this.heard.length;
    this.heard.push({ isFinal, 0: { transcript } });
    this.onresult?.({ resultIndex: at, results: this.heard });
  }
}

const area = (value = "", caret = value.length) => ({
  value,
  selectionStart: caret as number | null,
  selectionEnd: caret as number | null,
  setSelectionRange(s: number, e: number) {
    this.selectionStart = s;
    this.selectionEnd = e;
  },
});

describe("dictation", () => {
  it("is offered only where the browser has speech recognition", () => {
    expect(recognitionCtor({})).toBeNull();
    expect(recognitionCtor({ webkitSpeechRecognition: FakeRecognition })).toBe(FakeRecognition);
    class Std extends FakeRecognition {}
    expect(recognitionCtor({ SpeechRecognition: Std, webkitSpeechRecognition: FakeRecognition })).toBe(Std);
  });

  it("inserts at the caret, spaced from the words around it", () => {
    expect(insertAt("", 0, 0, "run the tests")).toEqual({ value: "run the tests", caret: 13 });
    expect(insertAt("please", 6, 6, " run them ")).toEqual({ value: "please run them", caret: 15 });
    expect(insertAt("please now", 6, 6, "run")).toEqual({ value: "please run now", caret: 10 });
    expect(insertAt("fix X now", 4, 5, "the bug")).toEqual({ value: "fix the bug now", caret: 11 });
    expect(insertAt("same", 4, 4, "   ")).toEqual({ value: "same", caret: 4 });
  });

  it("puts each final result into the composer, none of the interim ones, and stops on a second tap", () => {
    const t = area("please", 6);
    const d = new Dictation(FakeRecognition, t, "en-GB");
    const states: unknown[] = [];
    d.onState = (s) => states.push(s);
    d.toggle();
    const rec = FakeRecognition.last!;
    expect(rec.started).toBe(1);
    expect(rec.lang).toBe("en-GB");
    expect(d.listening).toBe(true);
    rec.say("run the", false);
    expect(t.value).toBe("please");
    rec.say("run the tests");
    rec.say("and commit");
    expect(t.value).toBe("please run the tests and commit");
    expect(t.selectionStart).toBe(t.value.length);
    d.toggle();
    expect(rec.stopped).toBe(1);
    expect(d.listening).toBe(false);
    expect(states).toEqual(["listening", "idle"]);
  });

  it("says why when the microphone is refused, and ends listening when the browser ends it", () => {
    const d = new Dictation(FakeRecognition, area());
    d.start();
    FakeRecognition.last!.onerror?.({ error: "not-allowed" });
    FakeRecognition.last!.onend?.();
    expect(d.state).toEqual({ error: "the microphone is blocked for this site" });
    d.start();
    expect(d.listening).toBe(true);
    FakeRecognition.last!.onend?.();
    expect(d.state).toBe("idle");
  });
});
