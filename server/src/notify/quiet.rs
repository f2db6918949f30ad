//! Quiet hours: whether an instant falls in a user's daily window, read in their time zone
//! (so the window follows daylight saving time).

use jiff::tz::TimeZone;
use jiff::Timestamp;
use moor_protocol::notify::QuietHours;

/// A user's quiet hours, checked: minutes of the day and a known time zone.
#[derive(Debug, Clone)]
pub(crate) struct QuietWindow {
    start: u16,
    end: u16,
    zone: TimeZone,
}

impl QuietWindow {
    /// Checks `q`: both times `HH:MM`, not equal, and a time zone the built-in database knows.
    pub(crate) fn parse(q: &QuietHours) -> Result<Self, String> {
        let start = minute_of_day(&q.start)
            .ok_or_else(|| format!("start {:?} is not a time HH:MM", q.start))?;
        let end =
            minute_of_day(&q.end).ok_or_else(|| format!("end {:?} is not a time HH:MM", q.end))?;
        if start == end {
            return Err("start and end are the same time".into());
        }
        let zone = TimeZone::get(&q.time_zone)
            .map_err(|_| format!("{:?} is not a known time zone", q.time_zone))?;
        Ok(Self { start, end, zone })
    }

    /// Whether the instant `at_ms` (milliseconds since the epoch) is inside the window.
    pub(crate) fn contains(&self, at_ms: i64) -> bool {
        let Ok(at) = Timestamp::from_millisecond(at_ms) else {
            return false;
        };
        let local = self.zone.to_datetime(at);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// `HH:MM` (24-hour) as minutes since midnight.
fn minute_of_day(s: &str) -> Option<u16> {
    let (h, m) = s.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: &str, end: &str, zone: &str) -> QuietWindow {
        QuietWindow::parse(&QuietHours {
            start: start.into(),
            end: end.into(),
            time_zone: zone.into(),
        })
        .unwrap()
    }

    fn at(rfc3339: &str) -> i64 {
        rfc3339.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn a_window_past_midnight_holds_the_late_evening_and_the_early_morning() {
        let w = window("22:00", "07:00", "UTC");
        assert!(w.contains(at("2026-12-02T23:30:00Z")));
        assert!(w.contains(at("2026-12-02T06:59:00Z")));
        assert!(!w.contains(at("2026-12-02T07:00:00Z")));
        assert!(!w.contains(at("2026-12-02T12:00:00Z")));
        assert!(w.contains(at("2026-12-02T22:00:00Z")));
    }

    #[test]
    fn a_window_within_a_day_ends_before_its_end() {
        let w = window("12:00", "13:30", "UTC");
        assert!(w.contains(at("2026-12-02T12:00:00Z")));
        assert!(w.contains(at("2026-12-02T13:29:00Z")));
        assert!(!w.contains(at("2026-12-02T13:30:00Z")));
        assert!(!w.contains(at("2026-12-02T11:59:00Z")));
    }

    #[test]
    fn the_window_is_read_in_the_users_time_zone_across_daylight_saving_time() {
        let w = window("22:00", "07:00", "Europe/Paris");
        // Winter: UTC+1, so 22:00 in Paris is 21:00 UTC.
        assert!(w.contains(at("2026-12-02T21:30:00Z")));
        assert!(!w.contains(at("2026-12-02T20:30:00Z")));
        // Summer: UTC+2, so 22:00 in Paris is 20:00 UTC.
        assert!(w.contains(at("2026-07-02T20:30:00Z")));
        assert!(!w.contains(at("2026-07-02T05:30:00Z")));
    }

    #[test]
    fn bad_times_equal_times_and_unknown_zones_are_refused() {
        let q = |start: &str, end: &str, zone: &str| {
            QuietWindow::parse(&QuietHours {
                start: start.into(),
                end: end.into(),
                time_zone: zone.into(),
            })
        };
        assert!(q("24:00", "07:00", "UTC").is_err());
        assert!(q("7:00", "08:00", "UTC").is_err());
        assert!(q("07:60", "08:00", "UTC").is_err());
        assert!(q("08:00", "08:00", "UTC").is_err());
        assert!(q("22:00", "07:00", "Mars/Olympus").is_err());
        assert!(q("22:00", "07:00", "../../etc/passwd").is_err());
        assert!(q("22:00", "07:00", "America/New_York").is_ok());
    }
}
