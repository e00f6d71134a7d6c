//! The settings both backends share: how long things hold, and the scheduler id of graphs.

/// How long a task queue is remembered after it was last active, unless set otherwise
/// (Taskcluster's retention).
pub const DEFAULT_QUEUE_RETENTION_SECS: i64 = 5 * 24 * 3600;

/// Seconds a claim holds unless set otherwise (Taskcluster's 20 minutes).
pub const DEFAULT_CLAIM_TIMEOUT_SECS: i64 = 1200;

/// The rules' settings, the same on either backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// Seconds a claim holds before it must be renewed.
    pub claim_timeout_secs: i64,
    /// The task-graph scheduler's id, set on every graph task (only their resolutions are
    /// shown to the scheduler).
    pub graph_scheduler_id: String,
    /// Seconds a task queue, or a worker, is remembered after it was last seen.
    pub queue_retention_secs: i64,
    /// Seconds a worker counts as live after it was last seen (slices' capacity).
    pub worker_dead_after_secs: i64,
    /// Seconds a completed idempotent task may stand for new ones.
    pub dedup_window_secs: i64,
}

impl Default for StoreSettings {
    fn default() -> StoreSettings {
        StoreSettings {
            claim_timeout_secs: DEFAULT_CLAIM_TIMEOUT_SECS,
            graph_scheduler_id: shoal_engine::graph::DEFAULT_SCHEDULER_ID.to_owned(),
            queue_retention_secs: DEFAULT_QUEUE_RETENTION_SECS,
            worker_dead_after_secs: shoal_engine::worker::DEFAULT_DEAD_AFTER_SECS,
            dedup_window_secs: shoal_engine::dedup::DEFAULT_WINDOW_SECS,
        }
    }
}

impl StoreSettings {
    /// [`StoreSettings::queue_retention_secs`] in milliseconds.
    pub fn queue_retention_ms(&self) -> i64 {
        self.queue_retention_secs.saturating_mul(1000)
    }

    /// [`StoreSettings::worker_dead_after_secs`] in milliseconds.
    pub fn worker_dead_after_ms(&self) -> i64 {
        self.worker_dead_after_secs.saturating_mul(1000)
    }

    /// [`StoreSettings::dedup_window_secs`] in milliseconds.
    pub fn dedup_window_ms(&self) -> i64 {
        self.dedup_window_secs.saturating_mul(1000)
    }
}
