//! UTC instants with millisecond precision, written as RFC 3339 on the wire.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Parses an RFC 3339 date-time (any offset), truncating to milliseconds.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let at = OffsetDateTime::parse(text, &Rfc3339).ok()?;
        let millis = at.unix_timestamp_nanos() / 1_000_000;
        i64::try_from(millis).ok().map(Timestamp)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This instant moved by `millis` (negative moves back).
    #[must_use]
    pub fn plus_millis(self, millis: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(millis))
    }

    /// This instant moved forward by whole seconds.
    #[must_use]
    pub fn plus_secs(self, secs: i64) -> Timestamp {
        self.plus_millis(secs.saturating_mul(1000))
    }

    /// The RFC 3339 text (`2026-01-01T00:00:00.000Z`), or `None` outside years 0–9999.
    fn rfc3339(self) -> Option<[u8; 24]> {
        // Every status and message carries several timestamps, so this is written by hand
        // over a stack buffer rather than through a date library's general formatter.
        let (days, millis_of_day) = (self.0.div_euclid(MILLIS_PER_DAY), self.0.rem_euclid(MILLIS_PER_DAY));
        let (year, month, day) = civil_from_days(days);
        if !(0..=9999).contains(&year) {
            return None;
        }
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, width: usize, mut value: i64| {
            for index in (at..at + width).rev() {
                text[index] = b'0' + (value % 10) as u8;
                value /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, millis_of_day / 3_600_000);
        put(14, 2, millis_of_day / 60_000 % 60);
        put(17, 2, millis_of_day / 1000 % 60);
        put(20, 3, millis_of_day % 1000);
        Some(text)
    }
}

/// The text `rfc3339` wrote: ASCII digits and separators, always valid UTF-8.
fn ascii(text: &[u8; 24]) -> &str {
    std::str::from_utf8(text).unwrap_or_default()
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rfc3339() {
            Some(text) => f.write_str(ascii(&text)),
            None => write!(f, "invalid-timestamp({})", self.0),
        }
    }
}

const MILLIS_PER_DAY: i64 = 86_400_000;

/// The proleptic Gregorian (year, month, day) of a day counted from 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // As one string, not through `collect_str`: a status holds many timestamps, and
        // serde_json escapes what a formatter writes piece by piece.
        match self.rfc3339() {
            Some(text) => serializer.serialize_str(ascii(&text)),
            None => serializer.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Timestamp::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an RFC 3339 date-time")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_with_milliseconds() {
        let at = Timestamp::parse("2026-11-21T10:20:30.456Z").unwrap();
        assert_eq!(at.to_string(), "2026-11-21T10:20:30.456Z");
        let offset = Timestamp::parse("2026-11-21T12:20:30.456789+02:00").unwrap();
        assert_eq!(offset, at);
        assert_eq!(Timestamp::parse("2026-11-21"), None);
    }

    #[test]
    fn out_of_range_instants_are_marked_not_misprinted() {
        assert_eq!(Timestamp(i64::MAX).to_string(), format!("invalid-timestamp({})", i64::MAX));
        assert_eq!(Timestamp(-1).to_string(), "1969-12-31T23:59:59.999Z");
        let json = serde_json::to_string(&Timestamp(i64::MAX)).unwrap();
        assert_eq!(json, format!("\"invalid-timestamp({})\"", i64::MAX));
    }

    proptest::proptest! {
        #[test]
        fn formats_as_the_time_crate_does(millis in -62_167_219_200_000_i64..253_402_300_800_000) {
            let at = OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).unwrap();
            let expected = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                at.year(), u8::from(at.month()), at.day(), at.hour(), at.minute(), at.second(), at.millisecond()
            );
            let text = Timestamp(millis).to_string();
            proptest::prop_assert_eq!(&text, &expected);
            proptest::prop_assert_eq!(serde_json::to_string(&Timestamp(millis)).unwrap(), format!("\"{expected}\""));
            proptest::prop_assert_eq!(Timestamp::parse(&text), Some(Timestamp(millis)));
        }
    }
}
