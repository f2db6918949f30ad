import { describe, expect, it } from "vitest";
import { classSwitches, deviceLabel, keyBytes, quietHoursFrom, sinkLine } from "../src/views/notify";

describe("notify switch helpers", () => {
  it("decodes a base64url VAPID key into the 65 bytes of an uncompressed point", () => {
    const key = "BLn9b-VR0ca83knDNZ32dCHGyjJp-1riX9ZTN40MqV8K_LpQmLqxC_DoHvqvFXO_nGdAB4W9dogZb_sM-uV4JbY";
    const bytes = keyBytes(key);
    expect(bytes.length).toBe(65);
    expect(bytes[0]).toBe(4);
  });

  it("labels devices by platform", () => {
    expect(deviceLabel("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)")).toBe("iPhone/iPad");
    expect(deviceLabel("Mozilla/5.0 (Linux; Android 14)")).toBe("Android");
    expect(deviceLabel("Mozilla/5.0 (X11; Linux x86_64)")).toBe("Linux");
  });

  it("describes a sink by kind, label and URL", () => {
    expect(sinkLine({ kind: "ntfy", label: "phone", url: "https://ntfy.sh/t" })).toBe("ntfy · phone · https://ntfy.sh/t");
    expect(sinkLine({ kind: "webhook", label: "ci", url: "https://ci/hook" })).toBe("webhook · ci · https://ci/hook");
  });

  it("shows every class, muted ones off", () => {
    const switches = classSwitches({ classes: ["turn", "ended"] });
    expect(switches.map((s) => s.class)).toEqual(["permission", "turn", "stalled", "crashed", "bridge_lost", "input_failed", "ended", "summary"]);
    expect(switches.filter((s) => !s.on).map((s) => s.class)).toEqual(["turn", "ended"]);
  });
});

describe("quiet hours", () => {
  it("are saved as the two times in this browser's time zone", () => {
    expect(quietHoursFrom("22:00", "07:00", "Europe/Paris")).toEqual({ start: "22:00", end: "07:00", time_zone: "Europe/Paris" });
  });
  it("are refused with a reason when a time is missing or both are the same", () => {
    expect(quietHoursFrom("", "07:00", "UTC")).toBe("Give a start and an end time.");
    expect(quietHoursFrom("07:00", "07:00", "UTC")).toBe("Start and end are the same time.");
  });
});
