//! Refusing a signed request seen before: every (client, nonce, timestamp) accepted within
//! the clock-skew window is remembered until its timestamp leaves the window.

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;

use shoal_engine::auth::TIMESTAMP_SKEW_SECS;

/// Seconds per bucket of remembered nonces; a bucket is dropped as a whole.
const BUCKET_SECS: u64 = 60;

/// The nonces seen, bucketed by their timestamp's minute.
#[derive(Debug, Default)]
pub struct Nonces {
    hasher: RandomState,
    seen: Mutex<BTreeMap<u64, HashSet<u64>>>,
}

impl Nonces {
    /// Records the nonce of a request signed at `ts` (seconds) by `client_id`; false when it
    /// was seen already. `now` is the server's clock, in seconds.
    pub fn first_use(&self, client_id: &str, nonce: &str, ts: u64, now: u64) -> bool {
        // 64 bits of a keyed hash: a collision (a false replay) needs ~2^32 nonces in the window.
        let key = self.hasher.hash_one((client_id, nonce, ts));
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let oldest = now.saturating_sub(TIMESTAMP_SKEW_SECS) / BUCKET_SECS;
        while let Some(entry) = seen.first_entry() {
            if *entry.key() >= oldest {
                break;
            }
            entry.remove();
        }
        seen.entry(ts / BUCKET_SECS).or_default().insert(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_accepted_once_per_client_and_timestamp() {
        let nonces = Nonces::default();
        assert!(nonces.first_use("a", "n1", 1000, 1000));
        assert!(!nonces.first_use("a", "n1", 1000, 1001));
        assert!(nonces.first_use("b", "n1", 1000, 1001), "another client's nonce is its own");
        assert!(nonces.first_use("a", "n1", 1001, 1001), "another timestamp makes another request");
    }

    #[test]
    fn nonces_are_forgotten_once_their_timestamp_left_the_window() {
        let nonces = Nonces::default();
        assert!(nonces.first_use("a", "n", 1000, 1000));
        let later = 1000 + TIMESTAMP_SKEW_SECS + 2 * BUCKET_SECS;
        assert!(nonces.first_use("a", "other", later, later));
        assert_eq!(nonces.seen.lock().unwrap().len(), 1, "the old bucket was dropped");
    }
}
