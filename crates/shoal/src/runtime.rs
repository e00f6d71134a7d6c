//! The async runtime each command runs on.
//!
//! A server on embedded SQLite has a thread of its own that every write goes through (the
//! store's writer); its runtime leaves that thread a core, as on two cores the writer
//! otherwise waits for one behind the request threads. `TOKIO_WORKER_THREADS`, when set,
//! decides instead.

use anyhow::Context;
use tokio::runtime::{Builder, Runtime};

/// Whether the runtime runs beside the embedded store's writer thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beside {
    /// A server on embedded SQLite.
    Writer,
    /// Anything else: the runtime may take every core.
    Nothing,
}

/// The runtime's worker threads on a machine of `cores` cores.
fn worker_threads(cores: usize, beside: Beside) -> usize {
    match beside {
        Beside::Writer => cores.saturating_sub(1).max(1),
        Beside::Nothing => cores.max(1),
    }
}

/// Starts the multi-threaded runtime.
pub(crate) fn start(beside: Beside) -> anyhow::Result<Runtime> {
    let mut builder = Builder::new_multi_thread();
    // Tokio reads TOKIO_WORKER_THREADS itself when no count is set here.
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        builder.worker_threads(worker_threads(cores, beside));
    }
    builder.enable_all().build().context("starting the runtime")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_keeps_a_core_of_its_own_where_there_are_two_or_more() {
        assert_eq!(worker_threads(1, Beside::Writer), 1);
        assert_eq!(worker_threads(2, Beside::Writer), 1);
        assert_eq!(worker_threads(8, Beside::Writer), 7);
        assert_eq!(worker_threads(2, Beside::Nothing), 2);
        assert_eq!(worker_threads(0, Beside::Nothing), 1);
    }
}
