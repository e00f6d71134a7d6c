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
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ok(at) = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000) else {
            return write!(f, "invalid-timestamp({})", self.0);
        };
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.millisecond()
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
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
}
