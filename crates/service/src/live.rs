//! Live logs: output a worker streams while its run goes on, readable by offset and
//! followable until the run ends (Swarming's output chunks, served by the server, so no
//! worker needs a public address).
//!
//! Each run being written or followed has an entry: a lock that serializes its appends, and
//! a watch channel carrying its size and whether the run has ended. Entries exist only
//! while someone writes or follows; the log itself is kept by the blob store (SQLite) or the
//! database (PostgreSQL, so any server's followers read it; growth elsewhere arrives as
//! [`LiveLogs::grown`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use shoal_engine::TaskId;
use tokio::sync::watch;

/// How far a live log has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogProgress {
    /// Bytes written so far.
    pub size: u64,
    /// Whether the run has ended (no more bytes will come).
    pub done: bool,
}

/// One run's live log.
#[derive(Debug)]
pub(crate) struct LiveLog {
    pub(crate) append: tokio::sync::Mutex<()>,
    pub(crate) progress: watch::Sender<LogProgress>,
}

/// The runs whose logs are being written or followed.
#[derive(Debug, Default)]
pub(crate) struct LiveLogs {
    runs: Mutex<HashMap<(TaskId, u32), Arc<LiveLog>>>,
}

impl LiveLogs {
    /// The entry of a run, made if missing; `true` when it was just made (the caller then
    /// fills in what it finds on disk and in the store).
    pub(crate) fn entry(&self, task_id: TaskId, run_id: u32) -> (Arc<LiveLog>, bool) {
        let mut runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(log) = runs.get(&(task_id, run_id)) {
            return (Arc::clone(log), false);
        }
        let log = Arc::new(LiveLog {
            append: tokio::sync::Mutex::new(()),
            progress: watch::Sender::new(LogProgress::default()),
        });
        runs.insert((task_id, run_id), Arc::clone(&log));
        (log, true)
    }

    /// A run's log grew to `size` elsewhere: its followers here, if any, read on.
    pub(crate) fn grown(&self, task_id: TaskId, run_id: u32, size: u64) {
        let runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(log) = runs.get(&(task_id, run_id)) {
            log.progress.send_if_modified(|progress| {
                let grew = size > progress.size;
                progress.size = progress.size.max(size);
                grew
            });
        }
    }

    /// The runs whose logs are being written or followed now.
    pub(crate) fn open(&self) -> Vec<(TaskId, u32)> {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().copied().collect()
    }

    /// The run ended: followers finish once they have read everything; the entry goes.
    pub(crate) fn finish(&self, task_id: TaskId, run_id: u32) {
        let removed = {
            let mut runs = self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            runs.remove(&(task_id, run_id))
        };
        if let Some(log) = removed {
            log.progress.send_modify(|progress| progress.done = true);
        }
    }
}
