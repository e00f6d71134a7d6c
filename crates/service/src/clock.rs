//! The wall clock, read in one place.

use std::time::{SystemTime, UNIX_EPOCH};

use shoal_engine::Timestamp;

/// The current time.
#[must_use]
pub fn now() -> Timestamp {
    let millis = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis());
    Timestamp(i64::try_from(millis).unwrap_or(i64::MAX))
}
