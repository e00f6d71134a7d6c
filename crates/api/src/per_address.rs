//! What one client address holds, counted so that it cannot take every place a server has:
//! open connections (a share of the cap), and long-lived answers (event streams and live-log
//! follows).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::ApiError;

/// Most event streams and live-log follows one client address may hold open at once.
pub(crate) const MAX_STREAMS_PER_ADDRESS: usize = 32;

/// Places held per client address.
#[derive(Clone, Default)]
pub(crate) struct PerAddress(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One place an address holds; dropped, it frees the place.
pub(crate) struct Place {
    counts: PerAddress,
    peer: IpAddr,
}

impl PerAddress {
    /// A place for `peer`, unless it already holds `share`.
    pub(crate) fn take(&self, peer: IpAddr, share: usize) -> Option<Place> {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(peer).or_default();
        if *count >= share {
            return None;
        }
        *count += 1;
        Some(Place { counts: self.clone(), peer })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.peer);
            }
        }
    }
}

/// Open event streams and live-log follows per client address.
#[derive(Clone, Default)]
pub struct Subscribers(PerAddress);

impl Subscribers {
    /// A place for one more stream of `peer`, or 429 when it holds [`MAX_STREAMS_PER_ADDRESS`].
    pub(crate) fn take(&self, peer: IpAddr) -> Result<Place, ApiError> {
        self.0.take(peer, MAX_STREAMS_PER_ADDRESS).ok_or_else(|| {
            ApiError::too_many(format!(
                "at most {MAX_STREAMS_PER_ADDRESS} event streams and live-log follows may be open from one client \
                 address; close one (an event stream takes many bindings)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_share_and_another_is_not_counted_against_it() {
        let subscribers = Subscribers::default();
        let (one, two): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let held: Vec<Place> = (0..MAX_STREAMS_PER_ADDRESS).map(|_| subscribers.take(one).unwrap()).collect();
        let refused = subscribers.take(one).err().unwrap();
        assert_eq!(refused.status, axum::http::StatusCode::TOO_MANY_REQUESTS);
        let other = subscribers.take(two).unwrap();
        drop(held);
        subscribers.take(one).unwrap();
        drop(other);
        assert!(!subscribers.0.0.lock().unwrap().contains_key(&two), "an address with none open is forgotten");
    }
}
