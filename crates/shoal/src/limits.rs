//! The open-descriptor limit: raised to what the system allows at start, and the connection
//! cap kept below it with headroom, so that a server full of connections still opens its
//! database files, blobs and log files, and new connections are answered rather than dropped.

/// Descriptors kept for what is not a client connection: database and blob files, the
/// PostgreSQL pools, the broker, the listener.
const HEADROOM: u64 = 256;

/// Fewest connections the cap allows.
const MIN_CONNECTIONS: u64 = 16;

/// Raises the soft limit on open descriptors to the hard limit where allowed; returns the
/// soft limit in force.
pub(crate) fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 1024 };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::debug!(from = soft, to = hard, "raised the open-descriptor limit");
        return hard;
    }
    soft
}

/// The connection cap for a descriptor limit of `descriptors`, unless `configured`.
pub(crate) fn max_connections(configured: Option<usize>, descriptors: u64) -> usize {
    configured.unwrap_or_else(|| descriptors.saturating_sub(HEADROOM).max(MIN_CONNECTIONS) as usize)
}

/// One client address's share of the connection cap `max_connections`: `configured`, or the
/// server's default share; never more than the cap.
pub(crate) fn per_address(configured: Option<usize>, max_connections: usize) -> usize {
    configured.unwrap_or_else(|| shoal_api::ConnectionLimits::default_share(max_connections)).clamp(1, max_connections)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_headroom_below_the_descriptor_limit() {
        assert_eq!(max_connections(None, 65_536), 65_280);
        assert_eq!(max_connections(None, 1024), 768);
        assert_eq!(max_connections(None, 100), 16, "never below the minimum");
        assert_eq!(max_connections(Some(50), 65_536), 50, "as configured");
        assert!(raise_descriptor_limit() >= 1, "reads the limit in force");
        assert_eq!(per_address(None, 65_280), 4080);
        assert_eq!(per_address(None, 16), 1);
        assert_eq!(per_address(Some(100_000), 768), 768, "never more than the cap");
    }
}
