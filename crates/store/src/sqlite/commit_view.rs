//! What waiting claimWork calls learn of commits without the writer: per task queue, how
//! many runs are pending and when the queue was last recorded active, as the last commit left
//! them; and a wake-up, at that commit, for each run it made pending.
//!
//! A claim that would find nothing and record nothing (the usual look of an idle worker)
//! answers from here instead of queueing behind writes. The writer publishes at each commit,
//! then wakes; a claim is in line before it looks (`shoal_service`'s wakers), so a run made
//! pending after it looked wakes it, and skipping the writer never hides work.
//!
//! The wake-up comes before the commit is durable, so the woken claim's own write is in the
//! writer's next batch while this one syncs. The claim is answered only once its own commit,
//! which follows this one in the WAL, is durable; a crash before that loses both together.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use shoal_engine::dimensions::Dimensions;
use shoal_engine::{TaskId, Timestamp};

use crate::WakeHook;
use crate::ops::queue_recorded_recently;

/// Per-queue pending counts and activity records, as of the last commit; the wake-up hook.
#[derive(Default)]
pub(crate) struct CommitView {
    queues: Mutex<HashMap<String, QueueView>>,
    wake: OnceLock<WakeHook>,
}

impl std::fmt::Debug for CommitView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitView").field("queues", &self.queues).finish_non_exhaustive()
    }
}

/// A run a batch made pending, for which a waiting claim is woken at the commit.
#[derive(Debug)]
pub(crate) struct Wake {
    /// The run's task.
    pub(crate) task_id: TaskId,
    pub(crate) task_queue_id: String,
    /// What the run needs of a worker (none: any worker).
    pub(crate) needs: Option<Dimensions>,
}

#[derive(Debug, Default, Clone, Copy)]
struct QueueView {
    /// Runs pending in the queue.
    pending: usize,
    /// When the queue was last recorded active (milliseconds), if since the server started.
    recorded_at: Option<i64>,
}

impl CommitView {
    /// Publishes a commit's changes: pending counts of the queues whose runs changed, and the
    /// queues it recorded active.
    pub(crate) fn publish<'a>(
        &self,
        pending: impl IntoIterator<Item = (&'a str, usize)>,
        recorded: impl IntoIterator<Item = (&'a str, i64)>,
    ) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        for (queue, count) in pending {
            update(&mut queues, queue, |commit_view| commit_view.pending = count);
        }
        for (queue, at) in recorded {
            update(&mut queues, queue, |commit_view| commit_view.recorded_at = Some(at));
        }
    }

    /// Sets who is woken at commit; false if someone already is.
    pub(crate) fn wake_with(&self, hook: WakeHook) -> bool {
        self.wake.set(hook).is_ok()
    }

    /// Wakes a waiting claim for each run a committed batch made pending.
    pub(crate) fn wake(&self, wakes: impl IntoIterator<Item = Wake>) {
        if let Some(hook) = self.wake.get() {
            for wake in wakes {
                hook(&wake.task_queue_id, wake.needs.as_ref());
            }
        }
    }

    /// Forgets the queues with nothing pending and no recent record at `now`: a claim on one
    /// goes through the writer, as on a queue never seen.
    pub(crate) fn forget_quiet(&self, now: Timestamp) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.retain(|_, commit_view| {
            commit_view.pending > 0 || commit_view.recorded_at.is_some_and(|at| queue_recorded_recently(at, now))
        });
    }

    /// How many queues it holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether a claim on `task_queue_id` at `now` would claim nothing and record nothing:
    /// no run is pending there and the queue was recorded active recently.
    pub(crate) fn nothing_to_claim(&self, task_queue_id: &str, now: Timestamp) -> bool {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        queues.get(task_queue_id).is_some_and(|commit_view| {
            commit_view.pending == 0 && commit_view.recorded_at.is_some_and(|at| queue_recorded_recently(at, now))
        })
    }
}

/// Changes `queue`'s commit_view, adding it if missing (looked up first: most commits change
/// queues already there, and `entry` would copy the name every time).
fn update(queues: &mut HashMap<String, QueueView>, queue: &str, change: impl FnOnce(&mut QueueView)) {
    match queues.get_mut(queue) {
        Some(commit_view) => change(commit_view),
        None => {
            let mut commit_view = QueueView::default();
            change(&mut commit_view);
            queues.insert(queue.to_owned(), commit_view);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::QUEUE_TOUCH_INTERVAL_MS;

    #[test]
    fn a_claim_skips_the_writer_only_when_nothing_is_pending_and_the_queue_was_recorded_recently() {
        let commit_view = CommitView::default();
        let at = Timestamp(1_000_000);
        assert!(!commit_view.nothing_to_claim("p/q", at), "an unknown queue must be recorded");
        commit_view.publish([("p/q", 2)], []);
        assert!(!commit_view.nothing_to_claim("p/q", at), "pending, and never recorded");
        commit_view.publish([], [("p/q", at.millis())]);
        assert!(!commit_view.nothing_to_claim("p/q", at), "two runs pending");
        commit_view.publish([("p/q", 0)], []);
        assert!(commit_view.nothing_to_claim("p/q", at));
        assert!(commit_view.nothing_to_claim("p/q", Timestamp(at.millis() + QUEUE_TOUCH_INTERVAL_MS - 1)));
        assert!(
            !commit_view.nothing_to_claim("p/q", Timestamp(at.millis() + QUEUE_TOUCH_INTERVAL_MS)),
            "the record is due again"
        );
        assert!(!commit_view.nothing_to_claim("p/other", at), "per queue");
    }
}
