//! How long the load generator's requests took, to tell a throughput bound by CPU from one
//! bound by each request's latency (the creators and workers each wait for their answer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A running mean of one kind of request's latency.
#[derive(Default)]
pub(crate) struct Mean {
    micros: AtomicU64,
    count: AtomicU64,
}

impl Mean {
    /// Counts one request sent at `sent` and answered now.
    pub(crate) fn record(&self, sent: Instant) {
        let micros = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// The mean so far (zero before any request).
    pub(crate) fn mean(&self) -> Duration {
        let count = self.count.load(Ordering::Relaxed);
        Duration::from_micros(self.micros.load(Ordering::Relaxed).checked_div(count).unwrap_or(0))
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The latencies of a throughput run's requests.
#[derive(Default)]
pub(crate) struct Timings {
    /// createTask.
    pub(crate) create: Mean,
    /// claimWork.
    pub(crate) claim: Mean,
    /// Runs claimWork handed out.
    pub(crate) claimed: AtomicU64,
    /// reportCompleted.
    pub(crate) report: Mean,
}

impl Timings {
    /// One line for the benchmark's output.
    pub(crate) fn summary(&self) -> String {
        let per_claim = self.claimed.load(Ordering::Relaxed) as f64 / self.claim.count().max(1) as f64;
        format!(
            "request latency (mean): createTask {:.1} ms, claimWork {:.1} ms ({per_claim:.1} runs a call), reportCompleted {:.1} ms",
            self.create.mean().as_secs_f64() * 1e3,
            self.claim.mean().as_secs_f64() * 1e3,
            self.report.mean().as_secs_f64() * 1e3,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_is_zero_before_any_request_and_the_average_after() {
        let mean = Mean::default();
        assert_eq!(mean.mean(), Duration::ZERO);
        mean.micros.store(3_000, Ordering::Relaxed);
        mean.count.store(2, Ordering::Relaxed);
        assert_eq!(mean.mean(), Duration::from_micros(1_500));
    }
}
